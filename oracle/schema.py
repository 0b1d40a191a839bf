"""Oracle for the CONTRACT area `schema` (standard library only, ragged lists, float64)."""
