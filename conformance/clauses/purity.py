"""Clauses of the CONTRACT area `purity`."""
