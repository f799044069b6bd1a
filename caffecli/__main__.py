"""``python -m caffecli ...`` runs the ``caffecli`` command."""
import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
