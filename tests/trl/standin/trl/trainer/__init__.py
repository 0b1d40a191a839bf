"""Stand-in: trl.trainer."""
