"""rlconform's stand-in for TRL (tests/trl/standin/README.md)."""

__version__ = "1.16.0+standin"
