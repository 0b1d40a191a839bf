"""Clauses of the CONTRACT area `layout`."""
