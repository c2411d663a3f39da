import sys

from bwprof.cli import main

sys.exit(main())
