"""Clauses of the CONTRACT area `schema`."""
