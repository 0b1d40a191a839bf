"""Clauses of the CONTRACT area `metrics`."""
