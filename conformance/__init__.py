"""The conformance engine: clause registry, case strategies, comparison, runner, reports, CLI."""
