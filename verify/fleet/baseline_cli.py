"""`tunefleet baseline DIR`: the fleet baseline file from a fleet run's node reports and the history."""
from __future__ import annotations

import os
import sys

from verify.fleet import baseline
from verify.fleet.model import BASELINE_NAME, load_fleet_dir_for
from verify.safe_io import PRIVATE_FILE, SHARED_FILE, UnsafePathError, write_file_atomic


def add_parser(sub) -> None:
    p = sub.add_parser("baseline", help="per hardware profile, the median and spread of every benchmark figure "
                                        "of a fleet run (and the history), for `report --baseline`")
    p.add_argument("directory", help="a fleet run's report directory (reports/<run-id>)")
    p.add_argument("--out", default=None, help=f"baseline file to write (default: DIR/{BASELINE_NAME})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--history", metavar="PATH", default=None,
                       help="history database read for each host's last runs (default: as for verify, when it exists)")
    where.add_argument("--no-history", action="store_true", help="the run's reports only")
    p.add_argument("--history-runs", type=int, default=baseline.HISTORY_RUNS,
                   help=f"each host's last runs taken from the history (default {baseline.HISTORY_RUNS})")
    p.add_argument("--world-readable", action="store_true", help="file readable by every user (default: owner only)")


def main(args) -> int:
    if args.history_runs < 1:
        print(f"tunefleet baseline: --history-runs {args.history_runs}: must be 1 or more", file=sys.stderr)
        return 2
    loaded = load_fleet_dir_for("tunefleet baseline", args.directory, note=" (left out)")
    if loaded is None:
        return 2
    nodes, _errors = loaded
    from verify.history.store import HistoryError

    try:
        history, history_path = read_history(args, [n.host for n in nodes])
    except HistoryError as exc:  # the named file refused: missing, foreign, damaged, newer schema
        print(f"tunefleet baseline: {exc}", file=sys.stderr)
        return 2
    document = baseline.build(nodes, history, runs=args.history_runs,
                              sources={"reports": os.path.abspath(args.directory), "history": history_path})
    out = args.out or os.path.join(args.directory, BASELINE_NAME)
    try:
        write_file_atomic(out, baseline.to_text(document), SHARED_FILE if args.world_readable else PRIVATE_FILE)
    except (UnsafePathError, OSError) as exc:
        print(f"tunefleet baseline: --out {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for name, profile in document["profiles"].items():
        print(f"{name}: {profile['hosts']} host(s), {len(profile['metrics'])} figure(s)")
    print(f"wrote {out}")
    return 0


def read_history(args, hosts: list) -> tuple:
    """(host -> its last runs, the path or None), read only.

    A --history that cannot be used is an error; the default one is used when it exists."""
    from verify.history.store import default_path, open_store

    if args.no_history:
        return {}, None
    path = args.history or default_path()
    if not args.history and not os.path.isfile(path):
        return {}, None
    with open_store(path, create=False) as store:
        wanted = set(hosts)
        runs = {h: r for h, r in store.latest_runs(args.history_runs).items() if h in wanted}
        return runs, path
