"""Clauses of the CONTRACT area `mask`."""
