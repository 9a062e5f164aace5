"""The documentation site's generator (``python -m docs.gen``); the pages are the Markdown files here."""
