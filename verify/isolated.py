"""How every Python tunefleet starts from Ansible (on the nodes as root, on the controller) runs a module of
this package: isolated, with only trusted import directories.

    python3 -I -c BOOTSTRAP PACKAGE_PARENT EXTRA_DIRS MODULE ARGS...

`-I` drops PYTHON* variables, the user's site-packages and the cwd from sys.path (no PYTHONPATH from the
task's environment, no sitecustomize.py of a user's directory). BOOTSTRAP puts PACKAGE_PARENT (the node's
private work directory, the controller's checkout) first so this module imports, then `main` checks it and
each of EXTRA_DIRS (':'-separated: verify_node_pythonpath, where PyTorch may live) with
verify.safe_io.trusted_import_dirs (owner root or us, no group/other/ACL writer on it or any parent) and
refuses the run, naming the directory and its owner, before anything is imported from them; then runs
MODULE as __main__. The playbooks hold BOOTSTRAP as `__verify_node_isolated` (roles/verify_node/vars/main.yml;
tests/unit/test_security_imports.py keeps the two equal). Standard library only.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import runpy
import sys

from verify.safe_io import UnsafePathError, check_dir_trusted, check_tree_trusted, trusted_import_dirs

BOOTSTRAP = "import sys; sys.path.insert(0, sys.argv[1]); import verify.isolated; verify.isolated.main()"
# The scheduler hooks' launcher (roles/scheduler_hooks, tunefleet-check.j2) as a -c program with the same call,
# PACKAGE_PARENT EXTRA_DIRS ARGS...: benchmarks/scheduler_modes.py times the hooks as the launcher starts them.
HOOK_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); import verify.isolated; "
                  "verify.isolated.run(sys.argv[1], sys.argv[2], 'verify', sys.argv[3:], end_fast=True)")
EXIT_REFUSED = 2  # bad input: a directory only someone else could have chosen
# What a scheduler hook may import beyond the standard library: pynvml (GPU readings; else nvidia-smi) and,
# for a hook without --spec that renders the desired state, jinja2, markupsafe and yaml.
HOOK_MODULES = ("verify", "pynvml", "jinja2", "markupsafe", "yaml")


def import_entries(names: tuple = HOOK_MODULES) -> dict:
    """{module: the sys.path entry this interpreter imports it from} for each of `names` it has, found
    without running any of them (find_spec): the hooks' launcher imports from these and nothing else."""
    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not os.path.isabs(spec.origin):
            continue  # absent, or built in: nothing to put on the path
        where = os.path.dirname(spec.origin)
        found[name] = os.path.dirname(where) if spec.submodule_search_locations is not None else where
    return found


def print_import_entries() -> None:
    """roles/scheduler_hooks asks the node's interpreter this at install (one JSON object)."""
    print(json.dumps(import_entries()))


def main() -> None:
    run(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])


def run(parent: str, extra: str, module: str, args: list, end_fast: bool = False) -> None:
    """MODULE as __main__ with ARGS, after PARENT and each of EXTRA (':'-separated) passed the trust check;
    the scheduler hooks' launcher (roles/scheduler_hooks, templates/tunefleet-check.j2) calls it directly,
    with end_fast: the process ends with the module's exit status as soon as it returns (end_now)."""
    try:
        check_dir_trusted(parent)
        check_tree_trusted(os.path.join(parent, "verify"))  # the rest of this package, imported from here on
        # The hooks (end_fast) import HOOK_MODULES and nothing else from EXTRA: those packages are walked, per job.
        dirs = trusted_import_dirs(extra.split(":") if extra else [], packages=HOOK_MODULES if end_fast else None)
    except (UnsafePathError, FileNotFoundError, NotADirectoryError) as exc:
        print(f"tunefleet: refusing to start {module}: {exc.strerror or exc}",
              file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    sys.path[1:1] = dirs
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if not end_fast:
            raise
        end_now(exit_status(done.code))
    if end_fast:
        end_now(0)


def exit_status(code: object) -> int:
    """The process status sys.exit(code) gives: None 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def end_now(status: int) -> None:
    """Flush what was printed and end the process without the interpreter's teardown, which took 15 ms of a
    prolog's ~200 on the 4x H200 (tests/device/nvml_costs.py). Only for a program whose files are closed and
    whose threads are done when it returns, as the hooks' are (verify.scheduler.cli closes the NVML reading);
    no atexit handler runs."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more can be said on it
            stream.flush()
    os._exit(status)
