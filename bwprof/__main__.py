"""`python -m bwprof`: the same entry point as the `bwprof` console script."""

import sys

from bwprof.entry import main

sys.exit(main())
