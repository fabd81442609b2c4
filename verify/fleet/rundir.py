"""The controller's directory of one fleet run: always new, unique and private.

The verify package bundle is written here and then shipped to every node and run there as root,
so a directory someone else made or can write would let them swap the bundle for their own code
(root on every node). `python3 -m verify.fleet.rundir PARENT` makes a new `<UTC time>-<random>`
directory (0700) and prints it; `--claim RUN_ID` accepts one `tunefleet verify -i` just made, only
if it is ours, private and empty.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import stat
import sys
from typing import Optional, Sequence

from verify.safe_io import (
    UnsafePathError,
    check_not_option,
    check_plain_component,
    make_unique_dir,
    open_trusted_dir,
)


def new_run_dir(parent: str) -> str:
    """A run directory that did not exist before: the UTC second for people, random for uniqueness."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return make_unique_dir(parent, f"{stamp}-")


def claim_run_dir(path: str) -> str:
    """`path` when it is a private (0700), empty directory only root and we control; else UnsafePathError."""
    fd = open_trusted_dir(path)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            raise UnsafePathError(1, f"run directory {path} has mode {mode:04o}, not 0700: refusing to put the "
                                  "bundle nodes run as root there")
        if os.listdir(fd):
            raise UnsafePathError(1, f"run directory {path} is not empty: a run directory is always new "
                                  "(leave verify_node_run_id empty to get one)")
    finally:
        os.close(fd)
    return os.path.abspath(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.rundir")
    parser.add_argument("parent", help="directory the run directories live in (verify_node_report_dir)")
    parser.add_argument("--claim", default="", help="a run id just made by `tunefleet verify -i`")
    parser.add_argument("--host", action="append", default=[],
                        help="an inventory host name: each becomes <run>/<host>/ on the controller")
    args = parser.parse_args(argv)
    try:
        for host in args.host:  # before anything is made: a name like ../../x would write outside the run
            check_plain_component(host, "inventory host name")
            check_not_option(host, "inventory host name")  # it reaches ssh, perftest and torchrun argv too
        if args.claim:
            if "/" in args.claim or args.claim in (".", ".."):
                raise UnsafePathError(1, f"verify_node_run_id {args.claim!r} must be a plain directory name")
            print(claim_run_dir(os.path.join(args.parent, args.claim)))
        else:
            print(new_run_dir(args.parent))
    except OSError as exc:
        print(f"run directory: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"run directory: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
