"""Quote a value for a POSIX shell: every name that reaches a boot script goes through here (issue 28 item 5)."""
from __future__ import annotations

import shlex


def shell_quote(value: object) -> str:
    """One shell word whatever the value holds: `a$(id>p)` -> `'a$(id>p)'` (shlex.quote, single quotes)."""
    return shlex.quote(str(value))


class FilterModule:
    def filters(self) -> dict:
        return {"shell_quote": shell_quote}
