"""Report writers: console table, JSON, JUnit XML and Markdown, all from one RunReport."""
