"""Filters for the memory role: read huge page reservations from a kernel command line."""
from __future__ import annotations

import re
import shlex

from ansible.errors import AnsibleFilterError

SIZE = re.compile(r"([0-9]{1,12})([KkMmGg]?)")
UNIT_KB = {"": 1 / 1024, "k": 1, "m": 1024, "g": 1024 * 1024}


def _size_kb(text: str) -> int:
    match = SIZE.fullmatch(text.strip())
    if not match:
        raise AnsibleFilterError(f"kernel command line: huge page size {text!r} is not a size like 2M or 1G")
    return int(int(match.group(1)) * UNIT_KB[match.group(2).lower()])


# COMMAND_LINE_SIZE is 2048 on x86 and at most 4096 elsewhere (arch/*/include/uapi/asm/setup.h); room to spare.
MAX_CMDLINE = 65536


def memory_cmdline_hugepages(cmdline: str, default_kb: int = 2048) -> dict:
    """Huge pages a kernel command line reserves at boot, as {size_kb: count}.

    `hugepages=N` applies to the `hugepagesz=` before it, else to `default_hugepagesz=`
    (else the architecture default); the kernel reads the line in that order.
    """
    current_kb = None
    default = default_kb
    pages: dict = {}
    if len(str(cmdline or "")) > MAX_CMDLINE:  # shlex takes seconds on a megabyte; the kernel keeps a few KiB
        raise AnsibleFilterError(f"kernel command line (/proc/cmdline) of {len(str(cmdline))} characters is longer "
                                 f"than any kernel keeps ({MAX_CMDLINE}): not a command line")
    try:
        words = shlex.split(cmdline or "")
    except ValueError as exc:  # an unbalanced quote: shlex's "No closing quotation"
        raise AnsibleFilterError(f"kernel command line (/proc/cmdline) cannot be split into words: {exc}: "
                                 f"{str(cmdline)[:120]!r}") from None
    for word in words:
        key, _, value = word.partition("=")
        if key == "default_hugepagesz":
            default = _size_kb(value)
        elif key == "hugepagesz":
            current_kb = _size_kb(value)
        elif key == "hugepages" and re.fullmatch(r"[0-9]{1,12}", value):
            pages[current_kb if current_kb is not None else default] = int(value)
    return pages


def memory_grub_args(count_1g: object) -> str:
    """The kernel arguments the GRUB drop-in appends for 1 GiB pages ('' when none)."""
    if isinstance(count_1g, bool) or not isinstance(count_1g, int) or count_1g < 0:
        raise AnsibleFilterError(f"memory_hugepages_1g: {count_1g!r} is not a page count (a whole number >= 0)")
    return f"hugepagesz=1G hugepages={count_1g}" if count_1g else ""


def memory_boot_1g_differs(cmdline: str, count_1g: int) -> bool:
    """True when the running kernel booted with a different 1 GiB page count than asked (reboot needed)."""
    return memory_cmdline_hugepages(cmdline).get(1024 * 1024, 0) != count_1g


class FilterModule:
    def filters(self) -> dict:
        return {
            "memory_cmdline_hugepages": memory_cmdline_hugepages,
            "memory_grub_args": memory_grub_args,
            "memory_boot_1g_differs": memory_boot_1g_differs,
        }
