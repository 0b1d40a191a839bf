"""Stand-in ``slime.observability.logging_utils.log``: the tracker sink (drops everything)."""


def log(args, metrics, step_key):
    return None
