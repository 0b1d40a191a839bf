"""Stand-in for slime (see ../README.md)."""
