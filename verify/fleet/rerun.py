"""The hosts of a fleet run that came back without a report, and the command that re-runs only them.

A 1,000-node run loses a few hosts (unreachable, a task that failed, a node that rebooted): the end of
`tunefleet verify -i` and of playbooks/verify.yml names them and prints the `--limit` that re-runs
only them, so nobody re-runs the 990 that answered. The list is also written to
<run>/rerun-hosts.txt (one name a line), which `--limit @FILE` reads when it is too long to type.

    python3 -m verify.fleet.rerun RUN_DIR --inventory INVENTORY [--host NAME ...]
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Iterable, Optional, Sequence

from verify.safe_io import PRIVATE_FILE, write_file_atomic

RERUN_FILE = "rerun-hosts.txt"
# Up to this many names go on the command line itself; more are read from RERUN_FILE (--limit @FILE).
MAX_NAMED = 20


def hosts_without_report(run_dir: str, hosts: Iterable[str]) -> list:
    """The hosts of the run (inventory names, each checked to be one path component before the run
    directory was made) with no <run>/<host>/report.json, sorted."""
    return sorted(h for h in set(hosts) if not os.path.isfile(os.path.join(run_dir, h, "report.json")))


def rerun_command(run_dir: str, inventory: str, missing: Sequence[str], playbook: bool = False) -> str:
    """`tunefleet verify -i INV --limit a,b` (or the ansible-playbook form) for the hosts without a report."""
    limit = ",".join(missing) if len(missing) <= MAX_NAMED else "@" + os.path.join(run_dir, RERUN_FILE)
    if playbook:
        return f"ansible-playbook -i {shlex.quote(inventory)} playbooks/verify.yml --limit {shlex.quote(limit)}"
    return f"tunefleet verify -i {shlex.quote(inventory)} --limit {shlex.quote(limit)}"


def report_missing(run_dir: str, inventory: str, hosts: Iterable[str], playbook: bool = False) -> list:
    """The lines that name the hosts without a report and re-run only them ([] when every host reported);
    writes RERUN_FILE in the run directory when some are missing."""
    missing = hosts_without_report(run_dir, hosts)
    if not missing:
        return []
    write_file_atomic(os.path.join(run_dir, RERUN_FILE), "".join(f"{h}\n" for h in missing), PRIVATE_FILE)
    shown = ", ".join(missing[:MAX_NAMED]) + (f" and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED
                                              else "")
    return [f"no report from {len(missing)} host(s): {shown} (listed in {os.path.join(run_dir, RERUN_FILE)})",
            f"re-run only them: {rerun_command(run_dir, inventory, missing, playbook)}"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.rerun")
    parser.add_argument("run_dir")
    parser.add_argument("--inventory", required=True, help="the inventory the run used (printed back)")
    parser.add_argument("--host", action="append", default=[], help="a host the run targeted")
    args = parser.parse_args(argv)
    for line in report_missing(args.run_dir, args.inventory, args.host, playbook=True):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
