"""Clauses of the CONTRACT area `offpolicy`."""
