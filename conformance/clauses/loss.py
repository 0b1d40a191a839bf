"""Clauses of the CONTRACT area `loss`."""
