"""Clauses of the CONTRACT area `logprob`."""
