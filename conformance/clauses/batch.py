"""Clauses of the CONTRACT area `batch`."""
