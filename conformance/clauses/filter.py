"""Clauses of the CONTRACT area `filter`."""
