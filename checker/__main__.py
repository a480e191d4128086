"""Entry point of `python -m checker`."""

import sys

from checker.cli import main

sys.exit(main())
