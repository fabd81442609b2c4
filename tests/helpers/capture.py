"""Run one command through verify.runner and save what it printed as a replayable fixture.

    python -m tests.helpers.capture NAME -- argv...

writes tests/fixtures/node/commands/NAME.json (argv, returncode, stdout, stderr).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from verify.runner import run_command

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "commands"


def main(argv: list) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    name, command = argv[0], argv[2:]
    out = run_command(command, timeout_s=30)
    record = {"argv": command, "returncode": out.returncode, "stdout": out.stdout, "stderr": out.stderr}
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"{name}: rc={out.returncode} {len(out.stdout)}B out, {len(out.stderr)}B err")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
