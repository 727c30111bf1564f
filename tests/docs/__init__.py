"""The documentation: every Markdown file renders as written and its links lead somewhere."""
