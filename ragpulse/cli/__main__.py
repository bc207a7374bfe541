"""``python -m ragpulse.cli``."""

import sys

from ragpulse.cli.main import main

sys.exit(main())
