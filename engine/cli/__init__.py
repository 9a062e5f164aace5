"""The ``kgqa`` command line: :mod:`engine.cli.main` builds it from the command modules here."""
