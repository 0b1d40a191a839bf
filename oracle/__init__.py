"""The reference oracle: ragged per-sample Python lists, float64, standard library only.

One function per contract clause; each docstring names the clause id and its formula.
"""
