"""`python -m luminal` runs the console script."""

import sys

from luminal.cli import main

sys.exit(main())
