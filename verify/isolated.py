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

import runpy
import sys

from verify.safe_io import UnsafePathError, check_dir_trusted, trusted_import_dirs

BOOTSTRAP = "import sys; sys.path.insert(0, sys.argv[1]); import verify.isolated; verify.isolated.main()"
EXIT_REFUSED = 2  # bad input: a directory only someone else could have chosen


def main() -> None:
    parent, extra, module, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    try:
        check_dir_trusted(parent)
        dirs = trusted_import_dirs(extra.split(":") if extra else [])
    except (UnsafePathError, FileNotFoundError, NotADirectoryError) as exc:
        print(f"tunefleet: refusing to start {module}: {exc.strerror or exc}",
              file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    sys.path[1:1] = dirs
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
