"""What holding import directories to the trust rule whole costs on a GPU node (issue 53 item 7): the hooks'
launcher walks the packages it imports every job, the interpreter finder walks each candidate's trees once a run.

    sudo python3 tests/device/import_trust_cost.py [REPEATS]

Run as root with the Python that has torch (a venv's python, or the system one). Prints, for this interpreter:
each sys.path entry walked whole (entries, ms; a refusal is printed with its reason, which is itself a finding);
the hooks' launcher's per-job part (the verify package and the five HOOK_MODULES packages in their import
directories: p50 / p90 / max over REPEATS, default 30); the interpreter finder's search as the fleet play runs it
(verify.fleet.node_python.find with this interpreter as verify_node_python: seconds, outcome, detail).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from verify.fleet.node_python import find  # noqa: E402
from verify.isolated import HOOK_MODULES, import_entries  # noqa: E402
from verify.safe_io import UnsafePathError, check_tree_trusted, trusted_import_dirs  # noqa: E402


def ms(began: float) -> float:
    return (time.perf_counter() - began) * 1000


def main() -> int:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    print(f"interpreter {sys.executable} (Python {sys.version.split()[0]}), euid {os.geteuid()}")
    print("\n== each sys.path entry walked whole (check_tree_trusted)")
    for entry in [p for p in sys.path if p and os.path.isdir(p)]:
        began = time.perf_counter()
        try:
            count = check_tree_trusted(entry)
            print(f"  {entry}: {count} entries, {ms(began):.0f} ms")
        except (UnsafePathError, OSError) as exc:
            print(f"  {entry}: REFUSED after {ms(began):.0f} ms: {exc.strerror or exc}")
    entries = sorted(set(import_entries(HOOK_MODULES).values()) - {str(REPO)})
    print(f"\n== the hooks' launcher, per job: the verify package and {', '.join(HOOK_MODULES)} in {entries}")
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        try:
            check_tree_trusted(str(REPO / "verify"))
            trusted_import_dirs(entries, packages=HOOK_MODULES)
        except (UnsafePathError, OSError) as exc:
            print(f"  REFUSED: {exc.strerror or exc}")
            break
        times.append(ms(began))
    if times:
        times.sort()
        print(f"  p50 {statistics.median(times):.1f} ms, p90 {times[int(0.9 * (len(times) - 1))]:.1f} ms, "
              f"max {times[-1]:.1f} ms over {len(times)}")
    print("\n== the interpreter finder (verify.fleet.node_python.find, this interpreter as verify_node_python)")
    began = time.perf_counter()
    search = find(sys.executable, [])
    print(f"  {ms(began) / 1000:.1f} s: used {search['used']}")
    for tried in search["tried"]:
        print(f"  {tried['python']}: {tried['outcome']}: {tried['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
