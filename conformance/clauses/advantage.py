"""Clauses of the CONTRACT area `advantage`."""
