"""Oracle for the CONTRACT area `batch` (standard library only, ragged lists, float64)."""
