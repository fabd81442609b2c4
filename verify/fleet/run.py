"""`tunefleet verify -i INVENTORY [--limit PATTERN]`: playbooks/verify.yml through ansible-runner.

Progress is printed per host as Ansible's events arrive (a 64-node run should not look frozen for
minutes), and at the end the fleet report's summary: which hosts are bad and why.

Every Ansible command (ansible-inventory here, ansible-playbook through ansible-runner) gets the
project's own ANSIBLE_CONFIG, starts in a root-owned directory and sees an allow-listed environment
(ansible_env): an ansible.cfg, an inventory plugin, an `ssh` on PATH or an ANSIBLE_* variable of
the caller's never reaches it (docs/security.md, rule 3).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from verify.bounded_load import BoundedLoadError, load_json_bounded, loads_json_bounded
from verify.fleet.model import FLEET_REPORT_MAX_BYTES
from verify.fleet.rerun import report_missing
from verify.result import EXIT_COULD_NOT_CHECK, EXIT_FAILED, EXIT_OK
from verify.runner import DEFAULT_CWD, CleanEnv, clean_env, run_command
from verify.safe_io import (
    check_dir_trusted,
    check_file_trusted,
    check_not_option,
    check_plain_component,
    open_trusted_dir,
)

PLAYBOOK = "playbooks/verify.yml"
# Events worth a line: a task finishing on a host, or a host dropping out.
EVENT_WORDS = {"runner_on_ok": "ok", "runner_on_failed": "FAILED", "runner_on_unreachable": "UNREACHABLE",
               "runner_on_skipped": "skipped", "runner_item_on_failed": "FAILED"}


class Progress:
    """Turns ansible-runner events into one line per host and task; counts per host."""

    def __init__(self, write: Callable[[str], None] = print, verbose: bool = False) -> None:
        self.write = write
        self.verbose = verbose
        self.done: dict = {}
        self.failed: dict = {}
        self.unreachable: set = set()

    def __call__(self, event: dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.write(f"== {data.get('play', '')}")
        if kind not in EVENT_WORDS:
            return True
        host = data.get("host") or data.get("remote_addr") or "?"
        task = data.get("task", "")
        self.done[host] = self.done.get(host, 0) + 1
        word = EVENT_WORDS[kind]
        if kind == "runner_on_unreachable":
            self.unreachable.add(host)
        if word in ("FAILED", "UNREACHABLE"):
            message = failure_message(data.get("res") or {})
            self.failed.setdefault(host, []).append(f"{task}: {message}")
            self.write(indented(f"  {host:24} {word:11} {task}: {message}", "  " + " " * 37))
        elif self.verbose or word == "ok":
            self.write(f"  {host:24} {word:11} {task}")
        return True


# Ansible's own words when a task failed without saying why; the reason is then in the task's stderr.
GENERIC_MESSAGES = ("non-zero return code", "MODULE FAILURE", "One or more items failed")
MESSAGE_MAX_LINES = 40
LINE_MAX_CHARS = 400


def failure_message(res: dict) -> str:
    """What a failed task said, whole: its msg, or its stderr where msg is Ansible's generic one (a command's
    "non-zero return code"), or each failed loop item's. Lines are kept (a preflight refusal lists one
    problem a line), each cut at a word, never mid-word, and the count bounded."""
    msg = str(res.get("msg") or "").strip()
    detail = str(res.get("stderr") or res.get("module_stderr") or "").strip()
    items = [failure_message(item) for item in res.get("results") or []
             if isinstance(item, dict) and item.get("failed")]
    if items and (not msg or msg.startswith(GENERIC_MESSAGES)):
        text = "\n".join(items)
    elif detail and (not msg or msg.startswith(GENERIC_MESSAGES)):
        text = f"{msg}: {detail}" if msg else detail
    else:
        text = msg or detail or str(res.get("stdout") or "").strip()
    lines = [word_cut(line.rstrip(), LINE_MAX_CHARS) for line in text.splitlines() if line.strip()]
    if len(lines) > MESSAGE_MAX_LINES:
        lines = lines[:MESSAGE_MAX_LINES] + [f"(and {len(lines) - MESSAGE_MAX_LINES} more lines)"]
    return "\n".join(lines) or "(no message)"


def word_cut(text: str, limit: int) -> str:
    """text, or its first words within limit and an ellipsis: never a word cut in two."""
    if len(text) <= limit:
        return text
    head = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return head.rstrip() + " …"


def indented(text: str, margin: str) -> str:
    """A message's later lines under its first, so a multi-line reason stays with its host."""
    first, *rest = text.split("\n")
    return "\n".join([first] + [margin + line for line in rest])


INVENTORY_TIMEOUT_S = 300  # a dynamic inventory asks a cloud API; a hung one must not hang the run
# What ansible-runner itself sets for its event callback (ansible_runner.config._base.prepare_env); the
# rest of the environment it seeds from the caller's is replaced by ansible_env.
RUNNER_OWN_KEYS = ("ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_RETRY_FILES_ENABLED", "AWX_ISOLATED_DATA_DIR",
                   "ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION", "RUNNER_OMIT_EVENTS",
                   "RUNNER_ONLY_FAILED_EVENTS")


COLLECTION = ("ansible_collections", "tunefleet", "gpu_node")
# After the collection's own root, the places ansible.cfg names besides the checkout's `make` link.
DEFAULT_COLLECTION_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")


def collection_root(home: Path, scratch: Optional[str] = None) -> Optional[Path]:
    """The directory that holds this tunefleet as the collection tunefleet.gpu_node, so the playbooks'
    tunefleet.gpu_node.* modules and filters resolve whatever the install form: an installed collection
    (`ansible-galaxy collection install -p DIR`: DIR) is its own; a checkout (no `make` needed) gets a link
    in `scratch`, a private directory of this run (mkdtemp, 0700), pointing at it. The caller's
    ANSIBLE_COLLECTIONS_PATH is not read: nothing from the caller's environment reaches a command run
    as root (docs/security.md, rule 3)."""
    if home.parts[-3:] == COLLECTION:
        return home.parents[2]
    return None if scratch is None else Path(scratch) / "collections"


def link_collection(home: Path, root: Optional[Path]) -> None:
    """Make collection_root's link for a checkout (nothing for an installed collection) before Ansible
    starts: each directory and the link made by descriptor inside the run's private scratch directory."""
    if root is None or home.parts[-3:] == COLLECTION:
        return
    fd = os.open(str(root.parent), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name in (root.name,) + COLLECTION[:-1]:
            with contextlib.suppress(FileExistsError):  # O_NOFOLLOW below: only a directory is entered
                os.mkdir(name, 0o700, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        with contextlib.suppress(FileExistsError):
            os.symlink(str(home), COLLECTION[-1], dir_fd=fd)
    finally:
        os.close(fd)


def ansible_env(home: Path, extra: Optional[dict] = None, collections: Optional[Path] = None) -> CleanEnv:
    """The whole environment of an Ansible command: verify.runner.clean_env with ansible-playbook and
    friends from this tunefleet's own venv first, and the project's ansible.cfg pinned (never one in
    the caller's cwd). Host keys stay checked: ansible-runner turns checking off unless told.
    `collections` (collection_root) is searched first for tunefleet.gpu_node."""
    own = {"ANSIBLE_CONFIG": str(home / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(home / "roles"),
           "TUNEFLEET_HOME": str(home), "PYTHONPATH": str(home), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_HOST_KEY_CHECKING": "True"}
    if collections is not None:
        own["ANSIBLE_COLLECTIONS_PATH"] = ":".join((str(collections),) + DEFAULT_COLLECTION_PATHS)
    return clean_env(dict(own, **(extra or {})), interpreter_first=True)


def pinned_runner_env(runner_env: dict, home: Path, callback_dir: str,
                      collections: Optional[Path] = None) -> CleanEnv:
    """ansible-runner's prepared environment (the caller's, plus its own keys) reduced to ansible_env
    plus the keys ansible-runner needs for its events."""
    env = ansible_env(home, collections=collections)
    env.update({key: runner_env[key] for key in RUNNER_OWN_KEYS if key in runner_env})
    env["ANSIBLE_CALLBACK_PLUGINS"] = callback_dir  # never joined with the caller's plugin directories
    return env


def runner_kwargs(args, home: Path, run_dir: Path, work: str, progress: Progress) -> dict:
    env = dict(ansible_env(home, collections=collection_root(home, work)))
    kwargs = {
        "private_data_dir": work,
        "playbook": str(home / PLAYBOOK),
        "inventory": os.path.abspath(args.inventory),
        "extravars": {"verify_node_report_dir": str(run_dir.parent), "verify_node_run_id": run_dir.name},
        "envvars": env,
        "event_handler": progress,
        "quiet": True,
        "project_dir": str(home),
    }
    if args.limit:
        kwargs["limit"] = with_controller(args.limit)
    if getattr(args, "forks", None):
        kwargs["forks"] = args.forks
    if getattr(args, "profile", None):
        # Over every inventory's verify_profile: the user named it for this run.
        kwargs["extravars"]["verify_profile"] = args.profile
    if getattr(args, "ib_fabric", None):
        # The opt-in fabric check, from a capture on this controller (checked in main before anything ran).
        kwargs["extravars"].update(verify_node_ib_fabric=True,
                                   verify_node_ib_fabric_input=os.path.abspath(args.ib_fabric))
    return kwargs


def main(args) -> int:
    import importlib.util

    if importlib.util.find_spec("ansible_runner") is None:
        print("tunefleet verify -i needs ansible-runner on the controller (pip install ansible-runner)",
              file=sys.stderr)
        return 2
    from verify.desired import project_root
    from verify.fleet.recording import finish_fleet
    from verify.fleet.rundir import new_run_dir
    from verify.history.cli import prepare as prepare_history
    from verify.history.store import HistoryError

    try:
        home = project_root()  # TUNEFLEET_HOME must pass the trust check (verify.desired)
        check_profile(getattr(args, "profile", None))
        from verify.fleet.baseline import from_args as baseline_from_args

        baseline_from_args(args)  # a bad --baseline/--rules is refused before any node is touched
        hosts = check_inventory(args.inventory, args.limit, home)
        if getattr(args, "ib_fabric", None):
            check_file_trusted(args.ib_fabric)  # a capture another user can change is refused, naming its owner
        history = prepare_history(args)  # refused before anything runs, like a bad inventory
    except (InventoryError, ValueError, HistoryError, OSError) as exc:
        print(f"tunefleet verify: {exc.strerror or exc if isinstance(exc, OSError) else exc}", file=sys.stderr)
        return 2
    if not (home / PLAYBOOK).is_file():
        # An installed wheel carries the role defaults and templates, not the playbooks and roles.
        print(f"tunefleet verify -i: {home / PLAYBOOK} not found: set TUNEFLEET_HOME to a tunefleet checkout or an "
              "installed collection (.../ansible_collections/tunefleet/gpu_node)", file=sys.stderr)
        return 2
    try:
        # New and private: the bundle every node runs as root is written in it (verify.fleet.rundir).
        run_dir = Path(new_run_dir(os.path.abspath(args.out)))
    except OSError as exc:
        print(f"tunefleet verify: report directory {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    progress = Progress(verbose=not args.quiet)
    if getattr(args, "slices", None):  # N ansible-playbook processes, one run directory (verify.fleet.slices)
        from verify.fleet.slices import Playbook, run_sliced

        playbook = Playbook(run=lambda a, d, p: run_in_scratch(lambda work: runner_kwargs(a, home, d, work, p), home),
                            progress=lambda: Progress(verbose=not args.quiet),
                            env=lambda extra: ansible_env(home, extra))
        outcome = run_sliced(args, run_dir, hosts, progress, playbook)
    else:
        outcome = run_in_scratch(lambda work: runner_kwargs(args, home, run_dir, work, progress), home)
    # Recorded on the controller (nodes keep none: noderun passes --no-history), the fleet report rebuilt
    # with each host's regressions against its own past, the verdicts acted on (verify.history).
    finish_fleet(history, str(run_dir))
    judge_against_baseline(args, run_dir)
    return finish(outcome.rc, outcome.status, run_dir, progress, hosts=hosts, inventory=args.inventory)


def run_in_scratch(make_kwargs: Callable[[str], dict], home: Path):
    """run_playbook with ansible-runner's private directory made for this run and removed after it."""
    with tempfile.TemporaryDirectory(prefix="tunefleet-runner-", dir=runner_scratch_parent()) as work:
        return run_playbook(make_kwargs(work), home)


def runner_scratch_parent() -> str:
    """Where ansible-runner's private directory goes: /tmp (root-owned, sticky), never the caller's
    TMPDIR, which another user's directory could be; mkdtemp makes the child 0700."""
    os.close(open_trusted_dir("/tmp", for_child=True))
    return "/tmp"


def run_playbook(kwargs: dict, home: Path):
    """ansible_runner.run, with the environment it seeds from the caller's replaced before anything
    starts (pinned_runner_env); the cwd is the project directory (ansible-runner's project_dir)."""
    from ansible_runner.interface import init_runner
    from ansible_runner.utils import get_callback_dir

    runner = init_runner(**kwargs)
    collections = collection_root(home, kwargs["private_data_dir"])
    link_collection(home, collections)
    runner.config.env = dict(pinned_runner_env(runner.config.env, home, get_callback_dir(), collections))
    runner.run()
    return runner


def judge_against_baseline(args, run_dir: Path) -> None:
    """With --baseline: the fleet report rebuilt with each node judged against it (verify.fleet.baseline),
    before its verdict sets the exit code."""
    if not getattr(args, "baseline", None) or not (run_dir / "fleet_report.json").is_file():
        return
    import argparse
    import contextlib
    import io

    from verify.fleet.report import main as rebuild

    with contextlib.redirect_stdout(io.StringIO()):  # the summary is printed once, by finish()
        rebuild(argparse.Namespace(directory=str(run_dir), format="json,md,html,junit", out=None,
                                   world_readable=getattr(args, "world_readable", False),
                                   baseline=args.baseline, rules=getattr(args, "rules", None)))


def check_profile(name: Optional[str]) -> None:
    """--profile NAME must be a shipped profile, refused here as `verify --local` refuses it."""
    if name:
        from verify.local_run import load_named_profile

        load_named_profile(name)  # UsageError (a ValueError) naming the profile and the known ones


class InventoryError(ValueError):
    """The inventory cannot be used; the message names the file and the problem."""


def check_inventory_trusted(inventory: str) -> None:
    """Ansible parses an inventory file, runs an executable one (a dynamic inventory script) and reads every
    file of an inventory directory and the group_vars/host_vars beside it: like --inject, --binary and --out,
    each must be a file or directory only root and we can change (verify.safe_io), or InventoryError names it
    and its owner before anything runs."""
    path = os.path.abspath(inventory)
    roots = [path] + [os.path.join(os.path.dirname(path), extra) for extra in ("group_vars", "host_vars")
                      if os.path.isfile(path)]
    try:
        for top in roots:
            if not os.path.lexists(top):
                continue
            if not os.path.isdir(top):
                check_file_trusted(top)
                continue
            check_dir_trusted(top)
            seen = set()
            # Ansible reads through a symlinked sub-directory too: walked through it (each link trust-checked on the
            # way, as root's only), each real directory once.
            for directory, subdirs, files in os.walk(top, followlinks=True):
                seen.add(os.path.realpath(directory))
                for name in sorted(subdirs):
                    check_dir_trusted(os.path.join(directory, name))
                subdirs[:] = [n for n in subdirs if os.path.realpath(os.path.join(directory, n)) not in seen]
                for name in sorted(files):
                    check_file_trusted(os.path.join(directory, name))
    except OSError as exc:
        raise InventoryError(f"inventory {inventory}: {exc.strerror or exc}") from None


def with_controller(limit: str) -> str:
    """A --limit that keeps playbooks/verify.yml's controller plays: they run on the implicit localhost, and a
    limit without it skipped them (the node play then failed for the run directory they make; found by the fix
    scenario, and the "re-run only them" command verify -i prints is such a limit). Each comma-separated item
    may be a pattern or @FILE (Ansible reads either); localhost is added unless an item names it."""
    items = [item.strip() for item in limit.split(",")]
    return limit if "localhost" in items else f"{limit},localhost"


def check_inventory(inventory: str, limit: Optional[str] = None, home: Optional[Path] = None) -> list:
    """The hosts a run would reach. Ansible on its own only warns about an inventory it cannot
    parse and then runs against the implicit localhost: refuse that before anything runs.
    ansible-inventory runs as every Ansible command does (ansible_env, in `/`)."""
    if not os.path.exists(inventory):
        raise InventoryError(f"inventory {inventory} does not exist")
    check_inventory_trusted(inventory)
    if home is None:
        from verify.desired import project_root

        home = project_root()
    tool = Path(sys.executable).parent / "ansible-inventory"
    argv = [str(tool) if tool.exists() else "ansible-inventory", "-i", os.path.abspath(inventory), "--list"]
    if limit:
        argv += ["--limit", limit]
    env = ansible_env(home, {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
                             "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true", "ANSIBLE_NOCOLOR": "1"})
    done = run_command(argv, timeout_s=INVENTORY_TIMEOUT_S, env=env, cwd=DEFAULT_CWD)
    if not done.ok:
        detail = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())[:600]
        raise InventoryError(f"inventory {inventory} cannot be parsed: {detail or 'ansible-inventory timed out'}")
    try:
        data = loads_json_bounded(done.stdout, f"ansible-inventory --list of {inventory}")
    except BoundedLoadError as exc:
        raise InventoryError(str(exc)) from None
    if not isinstance(data, dict):
        raise InventoryError(f"inventory {inventory}: ansible-inventory printed no mapping")
    hosts = sorted(set(data.get("_meta", {}).get("hostvars", {})) | {
        host for group in data.values() if isinstance(group, dict) for host in group.get("hosts", [])})
    if not hosts:
        where = f" matching --limit {limit}" if limit else ""
        raise InventoryError(f"inventory {inventory} has no hosts{where}")
    for host in hosts:
        try:  # the rules verify.fleet.rundir applies in the play, here before it starts
            check_plain_component(host, "host name")  # <run>/<host> must stay inside the run directory
            check_not_option(host, "host name")  # it reaches ssh, perftest and torchrun argv
        except ValueError as exc:
            raise InventoryError(f"inventory {inventory}: {exc}") from None
    return hosts


def finish(rc: int, status: str, run_dir: Path, progress: Progress, write: Callable[[str], None] = print,
           hosts: Sequence[str] = (), inventory: str = "") -> int:
    """Exit code of a fleet run: the fleet report's, unless Ansible itself could not finish. The hosts of the
    run without a report are named with the command that re-runs only them (verify.fleet.rerun)."""
    report = run_dir / "fleet_report.json"
    if not report.is_file():
        write(f"tunefleet verify: the playbook ended {status} (rc {rc}) before the fleet report was written")
        for host, problems in sorted(progress.failed.items()):
            write(indented(f"  {host}: {problems[-1]}", "    "))
        for line in report_missing(str(run_dir), inventory, hosts):
            write(f"  {line}")
        return EXIT_COULD_NOT_CHECK
    try:
        data = load_json_bounded(str(report), FLEET_REPORT_MAX_BYTES, what="fleet report", allow_nan=True)
    except BoundedLoadError as exc:
        write(f"tunefleet verify: {exc}")
        return EXIT_COULD_NOT_CHECK
    write(f"reports: {run_dir}")
    for host in sorted(progress.unreachable):
        write(f"  UNREACHABLE {host}: no report from this host")
    for line in report_missing(str(run_dir), inventory, hosts):
        write(f"  {line}")
    for entry in data["hosts"]:
        if entry["worst"] in ("FAIL", "ERROR") and entry["problems"]:
            first = entry["problems"][0]
            write(f"  {entry['worst']:5} {entry['host']}: {first['check_id']}: {first['reason']}")
    from verify.fleet.fix_plan import fleet_end_lines

    for line in fleet_end_lines(str(run_dir), inventory, hosts):  # what `tunefleet fix` would do (issue 49)
        write(line)
    if data["bad_hosts"]:
        return EXIT_FAILED
    # A host that never reported, or a task Ansible could not finish, is "could not check".
    if progress.unreachable or rc not in (0, None) or data["load_errors"]:
        return EXIT_COULD_NOT_CHECK
    return EXIT_OK
