"""tunefleet verify: prove that a GPU node is tuned the way the roles said, and fast."""
from __future__ import annotations

__version__ = "0.1.0"
