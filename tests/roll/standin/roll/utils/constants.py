"""Stand-in for ``roll.utils.constants``: the one constant the counters read."""

IGNORE_INDEX = -100
