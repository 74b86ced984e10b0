"""`python -m loadgen.cli …` (what the launcher and tests spawn), the same as `loadgen …`."""

import sys

from loadgen.cli import main

sys.exit(main())
