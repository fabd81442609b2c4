"""`tunefleet site -i INVENTORY` and `tunefleet restore -i INVENTORY`: playbooks/site.yml (tune) and
playbooks/restore.yml (undo) of the tunefleet this command belongs to, run by ansible-playbook the way
`tunefleet verify -i` runs verify.yml, from any directory and whatever the install form.

What the playbooks need is found as verify -i finds it (verify.desired.project_root: a checkout, or
TUNEFLEET_HOME at a checkout or an installed collection) and tunefleet.gpu_node resolves through
verify.fleet.run.collection_root, so a checkout needs no `make` and a collection installed under any
path (`ansible-galaxy collection install -p DIR`) needs no ANSIBLE_COLLECTIONS_PATH. ansible-playbook
is started by ansible-runner (verify.fleet.run.run_playbook: ansible_env, the project's ansible.cfg,
an allow-listed environment, cwd the project directory); its display is echoed event by event, as
ansible-playbook prints it (--check --diff included).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from verify.result import EXIT_BAD_INPUT, EXIT_COULD_NOT_CHECK, EXIT_OK

PLAYBOOKS = {"site": "playbooks/site.yml", "restore": "playbooks/restore.yml"}
HELP = {"site": "tune the hosts of an Ansible inventory (playbooks/site.yml; --check --diff shows what would change)",
        "restore": "undo tunefleet's changes on the hosts of an inventory (playbooks/restore.yml, from each "
                   "node's ledger)"}


def add_parsers(sub) -> None:
    for verb in PLAYBOOKS:
        p = sub.add_parser(verb, help=HELP[verb], description=f"{HELP[verb]}; run by ansible-playbook with "
                           "tunefleet's own ansible.cfg, from any directory")
        p.add_argument("-i", "--inventory", required=True, help="Ansible inventory (file, directory or script)")
        p.add_argument("--limit", help="Ansible host pattern")
        p.add_argument("--check", action="store_true", help="change nothing, show what would change")
        p.add_argument("--diff", action="store_true", help="show each change from what to what")
        if verb == "site":
            p.add_argument("--tags", help="only these roles (comma list: sysctl,network,...)")
            p.add_argument("--skip-tags", help="not these roles")
        p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                       help="as ansible-playbook -e (key=value, JSON, or @file)")
        p.add_argument("--forks", type=int, default=None, help="hosts Ansible works on at once")


def cmdline(args) -> str:
    """ansible-playbook's options beyond the inventory and the playbook, as ansible-runner's cmdline."""
    words = [f"--{flag}" for flag in ("check", "diff") if getattr(args, flag, False)]
    for option in ("tags", "skip_tags"):
        value = getattr(args, option, None)
        if value:
            words += [f"--{option.replace('_', '-')}", str(value)]
    for extra in args.extra_vars:
        # @file is read by ansible-playbook in the project directory: absolute from the caller's directory.
        words += ["-e", "@" + os.path.abspath(extra[1:]) if extra.startswith("@") else extra]
    return " ".join(shlex.quote(word) for word in words)


def echo(event: dict) -> bool:
    """Ansible's own display, as ansible-playbook prints it, one event at a time."""
    text = event.get("stdout")
    if text:
        print(text, flush=True)
    return True


def runner_kwargs(args, home: Path, work: str) -> dict:
    from verify.fleet.run import ansible_env, collection_root

    kwargs = {"private_data_dir": work, "playbook": str(home / PLAYBOOKS[args.command]),
              "inventory": os.path.abspath(args.inventory), "quiet": True, "project_dir": str(home),
              "envvars": dict(ansible_env(home, collections=collection_root(home, work))), "event_handler": echo,
              "cmdline": cmdline(args)}
    for option in ("limit", "forks"):
        if getattr(args, option, None):
            kwargs[option] = getattr(args, option)
    return kwargs


def main(args) -> int:
    import importlib.util

    from verify.desired import project_root
    from verify.fleet.run import InventoryError, check_inventory, run_in_scratch

    verb = f"tunefleet {args.command}"
    if importlib.util.find_spec("ansible_runner") is None:
        print(f"{verb} needs ansible-runner on the controller (pip install ansible-runner)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        home = project_root()
        check_inventory(args.inventory, args.limit, home)  # trusted, parsable, host names checked
    except (InventoryError, ValueError, OSError) as exc:
        print(f"{verb}: {exc.strerror or exc if isinstance(exc, OSError) else exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not (home / PLAYBOOKS[args.command]).is_file():
        print(f"{verb}: {home / PLAYBOOKS[args.command]} not found: set TUNEFLEET_HOME to a tunefleet checkout or "
              "an installed collection (.../ansible_collections/tunefleet/gpu_node)", file=sys.stderr)
        return EXIT_BAD_INPUT
    outcome = run_in_scratch(lambda work: runner_kwargs(args, home, work), home)
    if outcome.rc == 0:
        return EXIT_OK
    # ansible-playbook: 2 a host failed (a preflight refusal included), 4 unreachable, 5 bad options.
    print(f"{verb}: ansible-playbook ended {outcome.status} (rc {outcome.rc}); its messages are above",
          file=sys.stderr)
    return EXIT_BAD_INPUT if outcome.rc == 5 else EXIT_COULD_NOT_CHECK
