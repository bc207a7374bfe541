"""``python -m ragpulse.cli``."""

import sys

from ragpulse.cli import main

sys.exit(main())
