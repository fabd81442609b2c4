"""Record everything `verify` reads from a live node, so the run can be replayed as a test.

    python -m tests.helpers.snapshot OUT_DIR --spec desired.json [--name gpu-machine]

writes OUT_DIR/tree/ (every file, directory listing and symlink the checks and facts touched,
with sysfs symlinks kept so paths resolve the same way), OUT_DIR/recorded.json (every command run
and what it printed, the interpreter's site dirs, what NVML said about the GPUs), OUT_DIR/spec.json
and OUT_DIR/report.json (the report of that live run).
tests/unit/test_snapshots.py replays each snapshot under tests/fixtures/node/snapshots/ and
requires the same results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass, field

from verify.node import Node
from verify.runner import CommandOutput


@dataclass
class RecordingNode(Node):
    """A live Node that copies what it reads into `tree` and keeps every command's output."""

    tree: str = ""
    commands: list = field(default_factory=list)

    def _mirror(self, absolute: str) -> None:
        """Recreate absolute's ancestors in the tree, symlinks included, so it resolves as on the node."""
        parts = absolute.strip("/").split("/")
        for depth in range(1, len(parts)):
            live = "/" + "/".join(parts[:depth])
            snap = os.path.join(self.tree, *parts[:depth])
            if os.path.islink(live) and not os.path.lexists(snap):
                target = os.readlink(live)
                if os.path.isabs(target):
                    target = os.path.relpath(os.path.join(self.tree, target.lstrip("/")), os.path.dirname(snap))
                os.makedirs(os.path.dirname(snap), exist_ok=True)
                os.symlink(target, snap)
            if os.path.isdir(live):
                os.makedirs(os.path.realpath(snap), exist_ok=True)

    def _copy_entry(self, absolute: str) -> None:
        if not os.path.lexists(absolute):
            return
        self._mirror(absolute)
        snap = os.path.join(self.tree, absolute.lstrip("/"))
        if os.path.islink(absolute):
            if not os.path.lexists(snap):
                os.symlink(os.readlink(absolute), snap)
        elif os.path.isdir(absolute):
            os.makedirs(os.path.realpath(snap), exist_ok=True)
            # git keeps no empty directory, and a listed one (a *.dist-info name) is evidence
            open(os.path.join(os.path.realpath(snap), ".keep"), "a").close()
        elif not os.path.exists(snap):
            os.makedirs(os.path.dirname(os.path.realpath(snap)), exist_ok=True)
            open(os.path.realpath(snap), "a").close()  # listed but never read: an empty placeholder

    def read(self, absolute: str):
        text = super().read(absolute)
        if text is not None:
            self._mirror(absolute)
            with open(os.path.realpath(os.path.join(self.tree, absolute.lstrip("/"))), "w", encoding="utf-8") as out:
                out.write(text)
        return text

    def exists(self, absolute: str) -> bool:
        found = super().exists(absolute)
        if found:
            self._copy_entry(absolute)
        return found

    def listdir(self, absolute: str) -> list:
        names = super().listdir(absolute)
        for name in names:
            self._copy_entry(os.path.join(absolute, name))
        return names

    def glob(self, pattern: str) -> list:
        found = super().glob(pattern)
        for path in found:
            self._copy_entry(path)
        return found

    def readlink_name(self, absolute: str):
        self._copy_entry(absolute)
        return super().readlink_name(absolute)

    def run(self, argv: list, timeout_s: float = 10.0, env=None, cwd=None) -> CommandOutput:
        out = super().run(argv, timeout_s, env=env, cwd=cwd)
        self.commands.append({"argv": list(argv), "returncode": out.returncode, "stdout": out.stdout,
                              "stderr": out.stderr, "missing": out.missing, "timed_out": out.timed_out})
        return out


def main(argv: list) -> int:
    from verify.desired import load_spec_file
    from verify.local_run import verify_node

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--spec", required=True, help="rendered desired state (tunefleet spec > desired.json)")
    args = parser.parse_args(argv)
    tree = os.path.join(args.out, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    from verify.checks.versions import live_site_dirs

    node = RecordingNode(root="/", tree=tree)
    # the repository's own venv is this checkout's detail, not the node's: leave it out of fixtures
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    node.memo["site_dirs"] = [d for d in live_site_dirs() if not d.startswith(checkout + os.sep)]
    report = verify_node(load_spec_file(args.spec), node, bench=False)
    gpus = node.memo.get("gpus")
    recorded = {"commands": node.commands, "site_dirs": node.memo["site_dirs"],
                "gpus": gpus.to_dict() if gpus is not None else None}
    with open(os.path.join(args.out, "recorded.json"), "w", encoding="utf-8") as out:
        json.dump(recorded, out, indent=1)
    with open(os.path.join(args.out, "spec.json"), "w", encoding="utf-8") as out:
        json.dump(load_spec_file(args.spec), out, indent=1)
    with open(os.path.join(args.out, "report.json"), "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1)
    print(f"{args.out}: {len(report['results'])} results, {len(node.commands)} commands recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
