"""The summary table printed after a local run: failures first, one row per result.

It fits MAX_WIDTH columns whatever the terminal (a pipe or a CI log included), and never cuts a value: a
cell too long for its column wraps onto the row's next lines at spaces (check ids also after a dot), so
`4096 87380 268435456` is shown whole. Only a single word longer than its column (never a number of up
to VALUE_MAX digits) is split.
"""
from __future__ import annotations

import shutil

from verify.judging import remedies
from verify.report import (
    action_label,
    action_note,
    for_people,
    host_of,
    one_line,
    people_counts,
    standing,
    summary_of,
)
from verify.report.bench_phase import lines as bench_lines
from verify.safe_io import for_terminal

COLOURS = {"FAIL": "\033[31m", "ERROR": "\033[35m", "WARN": "\033[33m", "SKIP": "\033[2m", "PASS": "\033[32m",
           "RECORDED": "\033[36m"}
RESET = "\033[0m"
MAX_WIDTH = 120
CHECK_MAX = 36
VALUE_MAX = 20  # the longest value word kept whole: a 64-bit integer (fs.file-max 9223372036854775807) is 19
REASON_MIN = 24


def wrap(text: str, width: int, after: str = "") -> list:
    """text as lines of at most width, broken at spaces (and after each character in `after`); a word
    longer than width is split. Never [] (an empty cell is one empty line)."""
    words: list = []
    for word in text.split():
        piece = ""
        for char in word:
            piece += char
            if char in after:
                words.append(piece)
                piece = ""
        if piece:
            words.append(piece)
        words[-1] += " "
    lines, line = [], ""
    for word in words:
        while len(word.rstrip()) > width:  # one word wider than the column: split, nothing else fits
            if line:
                lines.append(line.rstrip())
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and len(line + word.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += word
    lines.append(line.rstrip())
    return [x for x in lines if x] or [""]


def render(report: dict, width: int = 0, colour: bool = False) -> str:
    width = min(width or shutil.get_terminal_size((MAX_WIDTH, 24)).columns, MAX_WIDTH)
    results = for_people(report)
    labels = [action_label(r) for r in results]  # "FAIL [reboot]": the status and what to do about it
    values = [(for_terminal(one_line(r.expected)), for_terminal(one_line(r.observed))) for r in results]
    status_width = max((len(label) for label in labels), default=6)
    check_width = min(max((len(r.check_id) for r in results), default=5), CHECK_MAX)
    longest = max((len(v) for pair in values for v in pair), default=8)  # most values fit whole on one line
    longest_word = max((len(w) for pair in values for v in pair for w in v.split()), default=8)
    value_width = max(min(max(longest, longest_word), VALUE_MAX), len("OBSERVED"))
    reason_width = max(width - (status_width + check_width + value_width * 2 + 4), REASON_MIN)
    header = (f"{'STATUS':<{status_width}} {'CHECK':<{check_width}} {'EXPECTED':<{value_width}} "
              f"{'OBSERVED':<{value_width}} REASON")
    lines = [header, "-" * min(width, status_width + check_width + value_width * 2 + 4 + reason_width)]
    for r, label, (expected, observed) in zip(results, labels, values):
        cells = (wrap(for_terminal(r.check_id), check_width, after="."), wrap(expected, value_width),
                 wrap(observed, value_width), wrap(for_terminal(one_line(r.reason or r.remediation)), reason_width))
        for index in range(max(len(c) for c in cells)):
            status = f"{label if index == 0 else '':<{status_width}}"
            if colour and index == 0:
                status = f"{COLOURS.get(label.split()[0], '')}{status}{RESET}"
            check, want, seen, why = (c[index] if index < len(c) else "" for c in cells)
            lines.append(f"{status} {check:<{check_width}} {want:<{value_width}} {seen:<{value_width}} {why}".rstrip())
    _, code = summary_of(report)
    tally = "  ".join(f"{status} {count}" for status, count in people_counts(report).items())
    note = action_note(report)
    fixes = remedies.summary_lines(results)  # the roles whose apply removes the findings (issue 49)
    closing = [*bench_lines(report), *fixes, *filter(None, [standing(report)]),
               f"{host_of(report)}: {tally}  {note + '  ' if note else ''}(exit code {code})"]
    lines.append("")
    for line in map(for_terminal, closing):  # a long line goes on under an indent, inside the width like the table
        if len(line) <= width:
            lines.append(line)
            continue
        head, *rest = wrap(line, width)
        lines += [head, *("  " + more for more in wrap(" ".join(rest), width - 2))] if rest else [head]
    return "\n".join(lines) + "\n"
