"""Adapters: how a trainer's postprocess implementation plugs into rlconform.

Each adapter converts layouts and calls the framework; it never contains math.
"""
