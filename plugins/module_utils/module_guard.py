# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Every module's last line of defence (issue 27 item 6): an exception no reader expected becomes a
failed result whose message names the module, the file and the value, never a traceback.

The readers themselves refuse damaged input by name (kernel_rules.kernel_int, sysfs.read_text, the
ledger's and the marker's bounded JSON); this catches what slips past them, so the play reports one
failed host with a message instead of "MODULE FAILURE". Standard library only.
"""
from __future__ import annotations

import contextlib
import traceback
from typing import Iterator


def describe(exc: BaseException) -> str:
    """The exception as one line a person can act on: its file and the offending value where it has them."""
    parts = [type(exc).__name__]
    filename = getattr(exc, "filename", None)
    if filename:
        parts.append(f"file {str(filename)[:200]!r}")
    if isinstance(exc, UnicodeDecodeError):
        parts.append(f"byte {exc.object[exc.start:exc.start + 1]!r} at offset {exc.start} is not {exc.encoding} text")
    elif isinstance(exc, RecursionError):
        parts.append("input nested too deeply")
    else:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())
        if text:
            parts.append(text[:300])
    return ": ".join(parts)


@contextlib.contextmanager
def failing_cleanly(module, name: str) -> Iterator[None]:
    """Run a module's work; any Exception becomes module.fail_json (SystemExit from exit_json/fail_json passes)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the guard's whole job is to catch what nothing else did
        module.fail_json(msg=f"{name}: nothing more was done after an unexpected error: {describe(exc)}",
                         exception=traceback.format_exc())
