"""``python -m retained``: the same as the ``retained`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
