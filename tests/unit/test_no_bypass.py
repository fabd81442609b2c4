"""Grep-level CI checks that keep issue 28's classes closed (not just its instances).

1. Nothing in verify/ starts a process except verify/runner.py (fixed PATH, allow-listed environment,
   root-owned cwd, trusted explicit paths, capped output). The one exception is ansible-runner in
   verify/fleet/run.py: it starts ansible-playbook itself (pexpect), and run_playbook replaces the
   environment it prepared with ansible_env before anything starts.
2. Nothing in verify/ reads a file with the builtin `open(` or Path.read_text/read_bytes/open except
   the sites listed below, each with why it is not a path another user can name; everything else reads
   through the bounded reader (verify.safe_io.read_capped, verify.bounded_load.read_bounded).
3. (issue 37 item 7) Nothing in verify/ or plugins/ writes, chmods, links or removes by name, or uses tempfile or
   shutil, outside the listed sites (a call with dir_fd= works by descriptor); no Ansible task runs a command
   (command, shell, raw, script) outside the listed files and counts: each new one is a root write or execute
   site for docs/security.md.
The checks walk the AST, so a comment or a docstring saying "subprocess" does not count.
"""
from __future__ import annotations

import ast
from pathlib import Path

VERIFY = Path(__file__).resolve().parents[2] / "verify"
RUNNER = "verify/runner.py"
SPAWNING_MODULES = {"subprocess", "pexpect", "pty", "multiprocessing", "ansible_runner"}
SPAWNING_CALLS = {"system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp",
                  "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "posix_spawn",
                  "posix_spawnp", "fork", "forkpty"}
# module -> why it may import a process-starting module
PROCESS_EXCEPTIONS = {
    RUNNER: "the one runner",
    "verify/fleet/run.py": "ansible-runner starts ansible-playbook; its prepared environment is replaced by "
                           "ansible_env (run_playbook), cwd is the project directory",
    "verify/scheduler/nvml.py": "os.fork without exec: the prolog's own NVML reading in a child of this process "
                                "(Reading); no program is started, no PATH or environment is consulted",
    "verify/fleet/slices.py": "multiprocessing's fork context without exec: each slice's playbook run in a child "
                              "of this process (run_jobs); ansible-playbook itself is started by run.py's "
                              "ansible-runner call, with ansible_env",
}
READ_CALLS = {"read_text", "read_bytes"}
# file -> (number of builtin open()/read_text/read_bytes sites, why none of them is a path another user names)
OPEN_ALLOWED = {
    "verify/bench/torch_allreduce.py": (2, "the engine's own result file in a TemporaryDirectory it made (0700)"),
    "verify/bench/cufile_read.py": (1, "engine: /etc/cufile.json (root-owned) read for its facts"),
}
# Sites another engineer's files still hold (issue 28 item 3): each must move to read_capped/read_bounded;
# this list only shrinks (a test below fails when one is fixed and not removed here).
OPEN_PENDING = {
}


def _modules():
    for path in sorted(VERIFY.rglob("*.py")):
        yield path.relative_to(VERIFY.parent).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _imports_spawning(tree: ast.AST) -> list:
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [n for n in names if n.split(".")[0] in SPAWNING_MODULES]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SPAWNING_CALLS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "os"):
            found.append(f"os.{node.func.attr}")
    return found


def _is_open(func: ast.AST) -> bool:
    """builtin open(), io.open/codecs.open, Path.read_text/read_bytes."""
    if isinstance(func, ast.Name):
        return func.id == "open"
    if not isinstance(func, ast.Attribute):
        return False
    module_open = func.attr == "open" and isinstance(func.value, ast.Name) and func.value.id in ("io", "codecs")
    return module_open or func.attr in READ_CALLS


def _open_sites(tree: ast.AST) -> int:
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_open(node.func))


def test_no_process_is_started_outside_the_one_runner():
    offenders = {name: found for name, tree in _modules()
                 if (found := _imports_spawning(tree)) and name not in PROCESS_EXCEPTIONS}
    assert not offenders, f"start processes through verify.runner.run_command only: {offenders}"


def test_ansible_runner_is_used_only_where_its_environment_is_replaced():
    users = {name for name, tree in _modules() if any(n.startswith("ansible_runner") for n in _imports_spawning(tree))}
    assert users <= {"verify/fleet/run.py"}, users


def test_no_file_is_opened_outside_the_bounded_reader():
    counts = {name: n for name, tree in _modules() if (n := _open_sites(tree))}
    unexplained = {name: n for name, n in counts.items()
                   if n > {**OPEN_ALLOWED, **OPEN_PENDING}.get(name, (0, ""))[0]}
    assert not unexplained, ("read through verify.safe_io.read_capped / verify.bounded_load.read_bounded "
                             f"(or list the site with why no other user can name its path): {unexplained}")


def test_the_pending_list_only_shrinks():
    counts = {name: _open_sites(tree) for name, tree in _modules()}
    fixed = {name for name, (n, _) in OPEN_PENDING.items() if counts.get(name, 0) < n}
    assert not fixed, f"fixed: remove from OPEN_PENDING (or lower its count): {fixed}"


def test_the_checks_catch_a_planted_bypass():
    planted = ast.parse("import subprocess\nimport os\nos.system('id')\ndata = open('/x').read()\n")
    assert _imports_spawning(planted) == ["subprocess", "os.system"]
    assert _open_sites(planted) == 1


# ---- issue 37 item 7: every root write site and every task that runs a command is a listed one ----------
REPO = VERIFY.parent
# os calls that write, link, chmod or remove by name (a call with dir_fd= works by descriptor and is fine),
# and anything of tempfile/shutil (tempfile picks its directory from TMPDIR; shutil writes by name).
WRITE_BY_NAME = {"chmod", "chown", "lchown", "makedirs", "mkdir", "rename", "replace", "symlink", "unlink", "rmdir",
                 "remove", "mkfifo", "link"}
# file -> (sites, why it is not a path another user can name or swap); docs/security.md lists the write sites.
WRITE_ALLOWED = {
    "verify/bench/perftest.py": (1, "tempfile.TemporaryDirectory for perftest's JSON (mkdtemp 0700; the verify "
                                    "process's TMPDIR: the lead's, see the issue 37 report)"),
    "verify/bench/storage.py": (1, "shutil.rmtree of its own make_unique_dir scratch directory"),
    "verify/bench/torch_allreduce.py": (1, "engine (clean environment, no TMPDIR): TemporaryDirectory 0700"),
    "verify/fleet/run.py": (1, "TemporaryDirectory in runner_scratch_parent() (/tmp, never TMPDIR)"),
    "verify/fleet/fix.py": (1, "TemporaryDirectory in run.runner_scratch_parent() (/tmp, never TMPDIR), as run.py"),
    "verify/report/terminal.py": (1, "shutil.get_terminal_size: reads, writes nothing"),
    "verify/runner.py": (1, "shutil.which over the fixed trusted PATH: reads, writes nothing"),
    "plugins/module_utils/nics.py": (1, "shutil.which over fixed system directories: reads, writes nothing"),
}
# Ansible tasks that run a command (command, shell, raw, script), per file; each new one is a new root
# execute site to list in docs/security.md (and, for a Python, to start through verify.isolated).
COMMAND_MODULES = ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw", "ansible.builtin.script",
                   "command", "shell", "raw", "script")
COMMAND_TASKS = {
    "playbooks/verify.yml": 8,  # the opt-in fabric check's 2 among them (ibqueryerrors, the collector)
    "playbooks/fix.yml": 1,  # the controller's plan (python3 -m verify.fleet.fix through verify.isolated)
    "roles/verify_node/tasks/pairwise.yml": 11,  # 2, and the round's 3 counted once per round (a YAML anchor, 3 rounds)
    "roles/verify_node/tasks/main.yml": 1, "roles/verify_node/tasks/multinode.yml": 1,
    "roles/verify_node/tasks/rdma_pairs.yml": 3, "roles/verify_node/tasks/rdma_round.yml": 1,
    "roles/verify_node/tasks/find_python.yml": 1, "roles/reboot/tasks/reboot.yml": 5,
    "roles/scheduler_hooks/tasks/main.yml": 4, "roles/pcie/handlers/main.yml": 1,
    "roles/network/tasks/irqbalance.yml": 1, "roles/network/tasks/persist_networkmanager.yml": 1,
    "roles/network/tasks/ethtool_apply.yml": 1, "roles/network/tasks/ethtool_read.yml": 2,
    "roles/network/handlers/main.yml": 1, "roles/storage/handlers/main.yml": 1,
    "roles/memory/tasks/hugepages_1g.yml": 1, "roles/memory/handlers/main.yml": 1,
}


def _write_sites(tree: ast.AST) -> int:
    found = 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)):
            continue
        module, attr = node.func.value.id, node.func.attr
        by_fd = any(k.arg in ("dir_fd", "src_dir_fd", "dst_dir_fd") for k in node.keywords)
        if (module == "os" and attr in WRITE_BY_NAME and not by_fd) or module in ("tempfile", "shutil"):
            found += 1
    return found


def _python_files():
    for base in ("verify", "plugins"):
        for path in sorted((REPO / base).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _command_tasks(node) -> int:
    import yaml  # noqa: PLC0415 - only this check reads YAML

    if isinstance(node, Path):
        node = yaml.safe_load(node.read_text(encoding="utf-8"))
    if isinstance(node, dict):
        return sum(1 for key in node if key in COMMAND_MODULES) + sum(_command_tasks(v) for v in node.values()
                                                                       if isinstance(v, (dict, list)))
    if isinstance(node, list):
        return sum(_command_tasks(v) for v in node if isinstance(v, (dict, list)))
    return 0


def test_nothing_writes_chmods_or_makes_temporary_files_by_name_outside_the_listed_sites():
    counts = {name: n for name, tree in _python_files() if (n := _write_sites(tree))}
    unexplained = {name: n for name, n in counts.items() if n > WRITE_ALLOWED.get(name, (0, ""))[0]}
    assert not unexplained, ("write by descriptor (verify.safe_io.write_in_dir / open_trusted_dir, "
                             f"ledger_core.open_root_dir) or list the site with why: {unexplained}")
    stale = {name for name, (n, _) in WRITE_ALLOWED.items() if counts.get(name, 0) < n}
    assert not stale, f"fewer sites than listed: lower WRITE_ALLOWED: {stale}"


def test_no_command_task_appears_outside_the_listed_sites():
    files = sorted([*(REPO / "roles").glob("*/tasks/*.yml"), *(REPO / "roles").glob("*/handlers/*.yml"),
                    *(REPO / "playbooks").glob("*.yml")])
    counts = {path.relative_to(REPO).as_posix(): n for path in files if (n := _command_tasks(path))}
    assert counts == COMMAND_TASKS, ("a command/shell task was added or removed: list it here and in "
                                     "docs/security.md with the rule that covers it")


def test_the_write_check_catches_a_planted_bypass():
    planted = ast.parse("import os, tempfile\nos.chmod('/var/lib/x', 0o700)\ntempfile.mkdtemp()\n"
                        "os.unlink('x', dir_fd=3)\n")
    assert _write_sites(planted) == 2
    assert _command_tasks([{"name": "x", "ansible.builtin.shell": "id"}, {"block": [{"command": "id"}]}]) == 2
