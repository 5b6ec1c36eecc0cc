"""``python -m node.cli``: the same as ``loconet``."""

import sys

from node.cli.main import main

sys.exit(main())
