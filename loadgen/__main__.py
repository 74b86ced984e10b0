"""`python -m loadgen …`, the same as `loadgen …`."""

import sys

from loadgen.cli import main

sys.exit(main())
