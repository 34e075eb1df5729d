"""``python -m sinkscope``: the same command line as the ``sinkscope`` script (sinkscope/cli)."""

import sys

from sinkscope.cli import main

sys.exit(main())
