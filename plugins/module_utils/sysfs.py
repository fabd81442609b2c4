# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""One /sys or /proc file as the roles' reads see it: the one home for block_devices, nics and
node_reads. Standard library only: this runs on the node's own python3."""
from __future__ import annotations

from typing import Optional


def read_text(path: str) -> Optional[str]:
    """The file's text, stripped; None when it cannot be read (absent, a directory, no permission).
    Odd bytes read as U+FFFD, so the parser downstream refuses them by name, not with a traceback."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None
