"""Oracle for the CONTRACT area `offpolicy` (standard library only, ragged lists, float64)."""
