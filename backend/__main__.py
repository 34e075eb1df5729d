"""``python -m backend``: see backend/cli.py."""

import sys

from backend.cli import main

sys.exit(main())
