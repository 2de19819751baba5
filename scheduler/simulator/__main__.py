"""``python -m scheduler.simulator``: see ``scheduler.simulator.cli``."""

import sys

from scheduler.simulator.cli import main

sys.exit(main())
