"""`tunefleet fix RUN_DIR`: from a verify run's findings to the roles that remove them, on those hosts only.

    tunefleet fix RUN_DIR [-i INVENTORY] [--apply] [--max-age 24h] [--quiet]

Reads the node reports of a fleet run directory (`tunefleet verify -i`) or of a `--local` run (its `--out`),
and plans per host the smallest set of roles whose remedy removes a finding (verify.judging.remedies: only
`role` remedies the desired state already holds a value for; a finding that needs an inventory change, a
reboot, a command or a hardware action is listed apart with it, never "fixed"). It prints the plan, runs
playbooks/site.yml with those roles' tags, limited to those hosts, in check mode with diff (the default), and
with `--apply` applies it, re-verifies those hosts only and writes the before/after of every finding it
addressed (fix_report.json, fix_report.md) in a new directory beside the run directory.

Refused before anything runs (exit 2): a run directory older than --max-age (its oldest node report), a
fleet run from another inventory than the one it recorded (`inventory.json`, written at the end of
`tunefleet verify -i`), a host the inventory no longer has, a local run from another host or over --root.
A local run applies on this host with connection local and the desired state the run was judged against.
Hosts are grouped by the set of roles they need: one playbook run per group (`--tags a,b --limit h1,h2`),
`changed` counted per host and role from Ansible's events. Reboots are never made here
(tunefleet_reboot_policy: never).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from verify.fleet.fix_plan import (  # noqa: F401 - fleet_end_lines, INVENTORY_RECORD: the plan's names, here too
    DEFAULT_MAX_AGE,
    FIXING_ROLES,
    INVENTORY_RECORD,
    SITE,
    FixRefused,
    check_age,
    check_source,
    findings_of,
    fleet_end_lines,
    groups,
    load_run,
    parse_age,
    plan,
    render_plan,
)
from verify.result import EXIT_BAD_INPUT, EXIT_COULD_NOT_CHECK, EXIT_FAILED, EXIT_OK
from verify.safe_io import PRIVATE_FILE, make_unique_dir, open_trusted_dir, write_in_dir


class Changes:
    """ansible-runner events -> `changed` per host and role, the failures, and the diffs (check mode)."""

    def __init__(self, write: Callable[[str], None] = print) -> None:
        self.write = write
        self.changed: dict = {}  # host -> role -> count
        self.ok: dict = {}
        self.failed: dict = {}
        self.diffs: list = []

    def __call__(self, event: dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host") or "?"
        role = data.get("role") or "(play)"
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            self.ok.setdefault(host, {}).setdefault(role, 0)
            self.ok[host][role] += 1
            self.changed.setdefault(host, {}).setdefault(role, 0)
            if res.get("changed"):
                self.changed[host][role] += 1
                self.diffs += [(host, role, data.get("task", ""), d) for d in _diffs(res)]
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            message = str(res.get("msg") or res.get("stderr") or "(no message)").strip()
            self.failed.setdefault(host, []).append(f"{data.get('task', '')}: {message}")
            self.write(f"  {host:24} FAILED      {data.get('task', '')}: {message[:300]}")
        return True


def _diffs(res: dict) -> list:
    found = res.get("diff")
    items = found if isinstance(found, list) else [found] if isinstance(found, dict) else []
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("prepared"):
            out.append(str(item["prepared"]))
        elif "before" in item or "after" in item:
            where = item.get("after_header") or item.get("before_header") or ""
            out.append(f"{where}: {str(item.get('before', '')).strip()[:200]!r} -> "
                       f"{str(item.get('after', '')).strip()[:200]!r}")
    return out


def local_extravars(desired: dict, roles: Sequence[str], vars_files: Sequence[str] = ()) -> dict:
    """The role variables of a --local run, for the roles applied: the run's own --vars files first (they hold
    what the desired state does not carry, e.g. storage_allow_no_match, which preflight judges), then each
    section key k of role r of its desired state as the variable r_k (templates/desired_state.json.j2);
    sysctl's settings are already merged."""
    from verify.desired import load_vars_file

    extravars = {}
    for path in vars_files:
        extravars.update(load_vars_file(path))
    for role in roles:
        section = desired.get(role)
        if not isinstance(section, dict):
            raise FixRefused(f"the run's desired state has no {role!r} section to apply")
        for key, value in section.items():
            extravars[f"{role}_{key}"] = value
        if role == "sysctl":
            extravars["sysctl_extra_settings"] = {}
    return extravars


def recorded_options(report: dict) -> argparse.Namespace:
    """The desired-state source and benchmark options the --local run recorded in its command line."""
    command = shlex.split(str((report.get("run") or {}).get("command") or ""))
    parser = argparse.ArgumentParser(add_help=False)
    for option in ("--spec", "--profile", "--bench"):
        parser.add_argument(option, default=None)
    parser.add_argument("--vars", action="append", default=[])
    parser.add_argument("--no-bench", action="store_true")
    used, _ = parser.parse_known_args(command[2:] if command[:2] == ["tunefleet", "verify"] else command)
    return used


def run_roles(home: Path, inventory: str, hosts: Sequence[str], roles: Sequence[str], apply: bool,
              changes: Changes, extravars: Optional[dict] = None, player: Optional[Callable] = None):
    """site.yml with only `roles`' tags (preflight always runs: it reads and refuses, changes nothing), limited
    to `hosts`, check mode with diff unless `apply`; never reboots. Returns ansible-runner's runner."""
    from verify.fleet import run as fleet_run

    with tempfile.TemporaryDirectory(prefix="tunefleet-fix-", dir=fleet_run.runner_scratch_parent()) as work:
        kwargs = {
            "private_data_dir": work, "playbook": str(home / SITE), "inventory": inventory,
            "limit": ",".join(hosts), "tags": ",".join(roles),
            "cmdline": "--diff" if apply else "--check --diff",
            "extravars": dict(extravars or {}, tunefleet_reboot_policy="never"),
            "envvars": dict(fleet_run.ansible_env(home)), "event_handler": changes, "quiet": True,
            "project_dir": str(home),
        }
        if inventory == "":
            dir_fd = open_trusted_dir(work)  # ours: mkdtemp's 0700 directory
            try:
                write_in_dir(dir_fd, "local-inventory", f"{hosts[0]} ansible_connection=local "
                             f"ansible_python_interpreter={sys.executable}\n", PRIVATE_FILE)
            finally:
                os.close(dir_fd)
            kwargs["inventory"] = os.path.join(work, "local-inventory")
        return (player or fleet_run.run_playbook)(kwargs, home)


def compare(before: dict, after: dict, plans: list) -> list:
    """One row per addressed finding: host, check, status and observed before and after."""
    rows = []
    for one in plans:
        results = {r.get("check_id"): r for r in (after.get(one.host) or {}).get("results") or []
                   if isinstance(r, dict)}
        for f in one.fixes:
            now = results.get(f.check_id)
            rows.append({"host": f.host, "check_id": f.check_id, "role": f.remedy.get("role"),
                         "before": {"status": f.status, "observed": f.observed},
                         "after": {"status": now.get("status") if now else "ABSENT",
                                   "observed": now.get("observed") if now else None}})
    return rows


def render_report(doc: dict) -> str:
    lines = [f"# tunefleet fix of {doc['run_dir']}", "", f"mode: {'apply' if doc['apply'] else 'check'}; "
             f"re-verified: {doc.get('after_dir') or 'no'}", "",
             "| host | role | changed |", "| --- | --- | --- |"]
    for host, roles in sorted(doc["changed"].items()):
        for role, count in sorted(roles.items()):
            lines.append(f"| {host} | {role} | {count} |")
    lines += ["", "| host | check | before | after |", "| --- | --- | --- | --- |"]
    for row in doc["findings"]:
        lines.append(f"| {row['host']} | {row['check_id']} | {row['before']['status']} {row['before']['observed']} | "
                     f"{row['after']['status']} {row['after']['observed']} |")
    if doc["apart"]:
        lines += ["", "## Left alone", ""] + [f"- {line}" for line in doc["apart"]]
    return "\n".join(lines) + "\n"


def _history(args, fix_args) -> None:
    """The fix's --history / --no-history handed to its re-verify."""
    if getattr(fix_args, "history", None):
        args.history = fix_args.history
    if getattr(fix_args, "no_history", False):
        args.no_history = True


def reverify_fleet(inventory: str, hosts: Sequence[str], out: str, fix_args=None) -> tuple:
    """`tunefleet verify -i INVENTORY --limit hosts` into a new run directory under `out`: (rc, run dir).
    The limit names localhost too: playbooks/verify.yml's controller plays run there, and a --limit that
    leaves the implicit localhost out skips them (the nodes' play then fails on their missing facts)."""
    from verify.fleet import run as fleet_run
    from verify.history.cli import add_verify_arguments

    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    args = parser.parse_args([])
    limit = list(hosts) + ([] if "localhost" in hosts else ["localhost"])
    args.__dict__.update(inventory=inventory, limit=",".join(limit), out=out, quiet=True, forks=None, profile=None,
                         ib_fabric=None, baseline=None, rules=None, world_readable=False)
    _history(args, fix_args)
    rc = fleet_run.main(args)
    made = [e.path for e in os.scandir(out) if e.is_dir(follow_symlinks=False)]
    return rc, (made[0] if len(made) == 1 else None)


def reverify_local(report: dict, out: str, fix_args=None) -> int:
    """`tunefleet verify --local` again, with the desired-state source and benchmarks the run used."""
    from verify.history.cli import add_verify_arguments
    from verify.local_run import main as local_main

    used = recorded_options(report)
    parser = argparse.ArgumentParser(add_help=False)
    add_verify_arguments(parser)
    args = parser.parse_args([])
    args.__dict__.update(spec=used.spec, profile=used.profile, vars=used.vars, bench=used.bench,
                         no_bench=used.no_bench or not (report.get("run") or {}).get("benchmarks", True),
                         root="/", format="json,md", out=out, world_readable=False, quiet=True, inject=None,
                         probe_login=False)
    _history(args, fix_args)
    return local_main(args)


def chosen_roles(text: Optional[str]) -> Optional[list]:
    """--roles as a list of tuning roles, or None (every role); another word is refused by name."""
    if text is None:
        return None
    roles = [word.strip() for word in str(text).split(",") if word.strip()]
    unknown = [role for role in roles if role not in FIXING_ROLES]
    if not roles or unknown:
        raise FixRefused(f"--roles {text!r}: {', '.join(unknown) or 'no role named'} is not one of "
                         f"{', '.join(FIXING_ROLES)}")
    return roles


def add_parser(sub) -> argparse.ArgumentParser:
    f = sub.add_parser("fix", help="apply the roles that remove a verify run's findings, on those hosts only "
                                   "(check mode unless --apply), then verify them again")
    f.add_argument("directory", help="a run directory: reports/<run> of `verify -i`, or the --out of `verify --local`")
    f.add_argument("-i", "--inventory", default=None,
                   help="the fleet run's inventory (default: the one it recorded; another one is refused)")
    f.add_argument("--apply", action="store_true", help="apply (default: check mode with diff, nothing changes)")
    f.add_argument("--max-age", default=DEFAULT_MAX_AGE,
                   help=f"refuse a run older than this (s, m, h or d; default {DEFAULT_MAX_AGE})")
    f.add_argument("--roles", default=None, metavar="ROLE[,ROLE]",
                   help="fix only these roles' findings (the others are listed, not run); default: every role "
                        "the findings name")
    f.add_argument("--quiet", action="store_true", help="no plan or diff lines")
    f.add_argument("--history", metavar="PATH", default=None, help="the history the re-verify records into "
                   "(as verify's --history)")
    f.add_argument("--no-history", action="store_true", help="the re-verify records no history")
    return f


def main(args, player: Optional[Callable] = None, write: Callable[[str], None] = print) -> int:
    import importlib.util

    from verify.desired import project_root
    from verify.fleet.run import InventoryError, check_inventory

    try:
        max_age = parse_age(args.max_age)
        run = load_run(args.directory)
        check_age(run, max_age)
        home = project_root()
        inventory_hosts = None
        if run.kind == "fleet" and (args.inventory or run.inventory):
            inventory_hosts = check_inventory(args.inventory or run.inventory, None, home)
        inventory = check_source(run, args.inventory, inventory_hosts)
        plans = plan(findings_of(run), chosen_roles(getattr(args, "roles", None)))
        todo = groups(plans)
        if todo and player is None and importlib.util.find_spec("ansible_runner") is None:
            raise FixRefused("tunefleet fix needs ansible-runner on the controller (pip install ansible-runner)")
        if todo and not (home / SITE).is_file():
            raise FixRefused(f"{home / SITE} not found: set TUNEFLEET_HOME to a tunefleet checkout or collection")
    except (FixRefused, InventoryError, ValueError, OSError) as exc:
        write(f"tunefleet fix: {exc.strerror or exc if isinstance(exc, OSError) else exc}")
        return EXIT_BAD_INPUT
    for line in render_plan(plans, run.path):
        if not args.quiet or not line.startswith("    "):
            write(line)
    if not todo:
        return EXIT_OK
    changes = Changes(write)
    for roles, hosts in todo:
        report = run.reports[hosts[0]]
        extravars = local_extravars(report.get("desired_state") or {}, roles, recorded_options(report).vars) \
            if run.kind == "local" else None
        write(f"{'applying' if args.apply else 'check mode (--check --diff)'}: site.yml --tags {','.join(roles)} "
              f"--limit {','.join(hosts)}")
        runner = run_roles(home, inventory, hosts, roles, args.apply, changes, extravars, player)
        if getattr(runner, "rc", 0) not in (0, None) and not changes.failed:
            changes.failed.setdefault(",".join(hosts), []).append(f"ansible-playbook ended {runner.status} "
                                                                  f"(rc {runner.rc})")
    for host in sorted(changes.changed):
        counts = ", ".join(f"{role} {n}" for role, n in sorted(changes.changed[host].items()) if role != "(play)")
        write(f"  {host}: {'changed' if args.apply else 'would change'}: {counts or 'nothing'}")
    if not args.quiet:
        for host, role, _task, diff in changes.diffs:
            write(f"    {host} {role}: {diff.strip()[:400]}")
    doc = {"schema": "tunefleet.fix/v1", "run_dir": run.path, "apply": bool(args.apply),
           "plan": [{"host": p.host, "roles": p.roles} for p in plans], "changed": changes.changed,
           "failed": changes.failed, "findings": [], "after_dir": None,
           "apart": [f.line() for one in plans for f in one.apart]}
    if changes.failed:
        for host, problems in sorted(changes.failed.items()):
            write(f"tunefleet fix: {host}: {problems[-1][:300]}")
    if not args.apply:
        write("check mode: nothing changed; run again with --apply to apply")
        return EXIT_FAILED if changes.failed else EXIT_OK
    parent = os.path.dirname(run.path)
    fix_dir = make_unique_dir(parent, f"{os.path.basename(run.path)}-fix-")
    fixed_hosts = [one.host for one in plans if one.roles]
    write(f"verifying again: {', '.join(fixed_hosts)} (its output in {os.path.join(fix_dir, 'reverify.log')})")
    said = io.StringIO()
    with contextlib.redirect_stdout(said):  # a task line per host and task: kept in the log, not shown
        if run.kind == "fleet":
            rc, after_dir = reverify_fleet(inventory, fixed_hosts, fix_dir, args)
        else:
            after_dir = os.path.join(fix_dir, "after")
            rc = reverify_local(next(iter(run.reports.values())), after_dir, args)
    if run.kind == "fleet":
        after = load_run(after_dir).reports if after_dir else {}
    else:
        after = load_run(after_dir).reports if os.path.isfile(os.path.join(after_dir, "report.json")) else {}
        after = {fixed_hosts[0]: next(iter(after.values()))} if after else {}
    text = said.getvalue()
    for line in text.splitlines()[-40:]:
        if line.startswith(("reports:", "tunefleet verify:")) or line.lstrip().startswith(("FAIL ", "ERROR ")):
            write(f"  re-verify {line.strip()}")
    doc.update(after_dir=after_dir, after_rc=rc, findings=compare(run.reports, after, plans))
    dir_fd = open_trusted_dir(fix_dir)
    try:
        write_in_dir(dir_fd, "fix_report.json", json.dumps(doc, indent=1, default=str), PRIVATE_FILE)
        write_in_dir(dir_fd, "fix_report.md", render_report(doc), PRIVATE_FILE)
        write_in_dir(dir_fd, "reverify.log", text, PRIVATE_FILE)
    finally:
        os.close(dir_fd)
    still = [r for r in doc["findings"] if r["after"]["status"] != "PASS"]
    for row in doc["findings"]:
        write(f"  {row['host']}: {row['check_id']}: {row['before']['status']} -> {row['after']['status']}")
    write(f"fix report: {os.path.join(fix_dir, 'fix_report.md')}")
    if changes.failed or still:
        return EXIT_FAILED
    return EXIT_OK if after else EXIT_COULD_NOT_CHECK


def plan_main(argv: Optional[Sequence[str]] = None) -> int:
    """`python3 -m verify.fleet.fix RUN_DIR [--max-age AGE]`: the plan as JSON ({"hosts": {host: [roles]},
    "apart": [line]}), refused as `tunefleet fix` refuses (exit 2): what playbooks/fix.yml runs on the controller."""
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.fix")
    parser.add_argument("directory")
    parser.add_argument("--max-age", default=DEFAULT_MAX_AGE)
    args = parser.parse_args(argv)
    try:
        run = load_run(args.directory)
        check_age(run, parse_age(args.max_age))
        plans = plan(findings_of(run))
    except (FixRefused, ValueError, OSError) as exc:
        print(f"tunefleet fix: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps({"kind": run.kind, "hosts": {p.host: p.roles for p in plans if p.roles},
                      "apart": [f.line() for p in plans for f in p.apart]}))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(plan_main())
