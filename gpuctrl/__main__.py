"""`python -m gpuctrl` runs the command line."""

import sys

from gpuctrl.cli import main

sys.exit(main())
