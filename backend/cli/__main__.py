"""``python -m backend.cli``: see :mod:`backend.cli`."""

import sys

from backend.cli import main

sys.exit(main())
