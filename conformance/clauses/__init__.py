"""One module per contract area; each registers its clauses with ``@clause``."""
