"""Stand-in ``slime.utils.data``: only ``get_source``."""


def get_source(sample):
    return (getattr(sample, "metadata", None) or {}).get("source_name", "unknown")
