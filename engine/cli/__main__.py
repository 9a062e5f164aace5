"""``python -m engine.cli.main``: the ``kgqa`` command."""
import sys

from engine.cli.main import main

sys.exit(main())
