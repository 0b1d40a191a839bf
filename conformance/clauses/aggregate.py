"""Clauses of the CONTRACT area `aggregate`."""
