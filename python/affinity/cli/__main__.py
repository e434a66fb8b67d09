"""``python -m affinity.cli``."""

import sys

from affinity.cli import main

sys.exit(main())
