"""Clauses of the CONTRACT area `kl`."""
