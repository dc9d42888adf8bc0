"""``python -m devyard``: the same as the ``devyard`` command."""

import sys

from .cli import main

sys.exit(main())
