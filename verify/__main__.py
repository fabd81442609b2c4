"""`python3 -m verify ...` is how nodes run verify without an install."""
from __future__ import annotations

import sys

from verify.cli import main

if __name__ == "__main__":
    sys.exit(main())
