"""What the fleet playbook runs on each node: `verify --local`, then its reports in one archive.

Over SSH (or podman exec) every fetched file is a round trip; one archive per node is one.
Runs on a bare python3 (standard library only). Exit code: verify's own (0, 1 or 2), or 3 when
verify did not leave a report at all.
"""
from __future__ import annotations

import argparse
import io
import os
import stat
import sys
import tarfile
from typing import Optional, Sequence

from verify.safe_io import PRIVATE_FILE, check_dir_trusted, write_file_atomic

MAX_SPEC_BYTES = 4 << 20  # a desired state is a few KB; verify.bounded_load caps its parse too


def archive_reports(report_dir: str, archive: str) -> int:
    """Pack the report files flat (no directory) so the controller unpacks them into <run>/<host>/.

    Runs as root: only regular files (never what a symlink points at) from a directory no one else
    can change, and the archive is a new private file in one (verify.safe_io).
    """
    check_dir_trusted(report_dir)
    names = sorted(n for n in os.listdir(report_dir)
                   if stat.S_ISREG(os.lstat(os.path.join(report_dir, n)).st_mode) and not n.startswith("."))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in names:
            tar.add(os.path.join(report_dir, name), arcname=name)
    write_file_atomic(archive, buffer.getvalue(), PRIVATE_FILE)
    return len(names)


def spec_with_python(spec_path: str, search_path: str) -> str:
    """A copy of the desired state beside it whose verify.python holds the interpreter search (the report's run
    facts say which interpreter ran; the benchmarks' torch rows say which were tried when none imports torch)."""
    import json

    from verify.bounded_load import load_json_bounded
    from verify.safe_io import read_trusted_file

    spec = load_json_bounded(spec_path, what="desired state")
    search = json.loads(read_trusted_file(search_path))
    spec.setdefault("verify", {})["python"] = dict(search, running=sys.executable)
    out = os.path.join(os.path.dirname(os.path.abspath(spec_path)), "desired_state.with-python.json")
    write_file_atomic(out, json.dumps(spec), PRIVATE_FILE)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.noderun")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--spec-stdin", action="store_true",
                        help="the desired state arrives on stdin (the play renders it on the controller): written to "
                             "--spec first, saving the node a template task (a remote stat and a copy)")
    parser.add_argument("--out", required=True, help="directory for the reports")
    parser.add_argument("--format", default="json,md,junit,prom")
    parser.add_argument("--archive", required=True, help="tar.gz of the reports, for one fetch")
    parser.add_argument("--python-search", default="",
                        help="the answer of verify.fleet.node_python: which interpreter runs this, what was tried")
    parser.add_argument("--root", default="/",
                        help="absolute root of the tree to read /proc, /sys and /etc from (verify_node_root; "
                             "a tree other than / is read, never the live node, and its benchmarks SKIP)")
    args = parser.parse_args(argv)
    if not os.path.isabs(args.root):
        print(f"verify_node_root must be an absolute path, got {args.root!r}", file=sys.stderr)
        return 2
    from verify.cli import main as verify_main

    if args.spec_stdin:
        text = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1)
        if len(text) > MAX_SPEC_BYTES:
            print(f"the desired state on stdin is over {MAX_SPEC_BYTES} bytes", file=sys.stderr)
            return 2
        write_file_atomic(args.spec, text, PRIVATE_FILE)
    if args.python_search:
        args.spec = spec_with_python(args.spec, args.python_search)

    # --no-history: a fleet run's history is kept once, on the controller (verify.fleet.recording.finish_fleet).
    code = verify_main(["verify", "--local", "--spec", args.spec, "--out", args.out, "--format", args.format,
                        "--root", args.root, "--quiet", "--no-history"])
    if not os.path.isfile(os.path.join(args.out, "report.json")):
        print(f"verify exited {code} without writing {args.out}/report.json", file=sys.stderr)
        return 3
    count = archive_reports(args.out, args.archive)
    print(f"verify exited {code}; {count} report files in {args.archive}")
    return code


if __name__ == "__main__":
    sys.exit(main())
