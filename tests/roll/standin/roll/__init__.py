"""Stand-in for ROLL (tests only)."""
