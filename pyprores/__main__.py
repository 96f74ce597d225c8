"""``python -m pyprores``: the same as the ``pyprores`` command."""

import sys

from .cli import main

sys.exit(main())
