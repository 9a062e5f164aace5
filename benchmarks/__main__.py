import sys

from engine.cli.main import main

# through the engine's command line, so that an error is reported as `kgqa bench`'s are
sys.exit(main(["bench", *sys.argv[1:]]))
