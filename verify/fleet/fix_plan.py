"""The plan of `tunefleet fix` (verify/fleet/fix.py runs it): a run directory's node reports read and checked
(age, inventory, host), and per host the roles whose remedy removes a finding (verify.judging.remedies), the rest
apart with its action. No Ansible here: the end of `tunefleet verify -i` (verify.fleet.run) prints from it.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import socket
from dataclasses import dataclass, field
from typing import Optional, Sequence

from verify.bounded_load import BoundedLoadError, read_bounded
from verify.fleet.model import json_loads
from verify.judging.remedies import ROLE, remedy_of, words
from verify.safe_io import PRIVATE_FILE, open_trusted_dir, write_in_dir

SITE = "playbooks/site.yml"
INVENTORY_RECORD = "inventory.json"  # what `tunefleet verify -i` ran against, in the run directory
DEFAULT_MAX_AGE = "24h"  # older findings may no longer be the node's: verify again instead
_AGE = re.compile(r"(\d+)\s*([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
FINDING = ("FAIL", "WARN")
# The roles site.yml applies that a finding's remedy can name (fix --roles chooses among them).
FIXING_ROLES = ("sysctl", "network", "storage", "gpu", "pcie", "memory", "limits", "cpu")


class FixRefused(ValueError):
    """The run directory cannot be fixed from; the message names it and why."""


@dataclass
class Finding:
    host: str
    check_id: str
    status: str
    reason: str
    observed: object
    remedy: Optional[dict]

    def line(self) -> str:
        said = words(self.remedy) if self.remedy else "no remedy recorded: read the finding"
        return f"{self.host}: {self.status} {self.check_id}: {self.reason[:120]} -> {said}"


@dataclass
class HostPlan:
    host: str
    roles: list = field(default_factory=list)
    fixes: list = field(default_factory=list)  # findings the roles remove
    apart: list = field(default_factory=list)  # findings left alone, with their action
    not_chosen: list = field(default_factory=list)  # a role's findings, that role left out by --roles


@dataclass
class RunDir:
    path: str
    kind: str  # "fleet" or "local"
    reports: dict  # host -> node report
    inventory: Optional[str] = None  # recorded by verify -i
    hosts: list = field(default_factory=list)


def parse_age(text: str) -> int:
    """'24h', '90m', '2d', '3600' -> seconds; anything else ValueError naming --max-age."""
    match = _AGE.fullmatch(str(text).strip())
    if not match or int(match.group(1)) <= 0:
        raise ValueError(f"--max-age {text!r}: give a positive number of seconds or a number with s, m, h or d "
                         f"(default {DEFAULT_MAX_AGE})")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _load(path: str, what: str) -> dict:
    try:
        data = json_loads(read_bounded(path, 64 << 20, what), what)
    except (OSError, BoundedLoadError) as exc:
        raise FixRefused(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(data, dict):
        raise FixRefused(f"{path}: not a {what}")
    return data


def load_run(path: str) -> RunDir:
    """The node reports of a run directory: `report.json` in it (a --local run), or `<host>/report.json` for
    each host of a fleet run (with its fleet_report.json)."""
    path = os.path.abspath(path)
    os.close(open_trusted_dir(path))  # a directory someone else can change decides what root applies
    if os.path.isfile(os.path.join(path, "report.json")):
        report = _load(os.path.join(path, "report.json"), "node report")
        return RunDir(path, "local", {str(report.get("host") or socket.gethostname()): report})
    if not os.path.isfile(os.path.join(path, "fleet_report.json")):
        raise FixRefused(f"{path} holds neither report.json (a --local run) nor fleet_report.json (a fleet run)")
    reports = {}
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        report_path = os.path.join(entry.path, "report.json")
        if entry.is_dir(follow_symlinks=False) and os.path.isfile(report_path):
            reports[entry.name] = _load(report_path, "node report")
    run = RunDir(path, "fleet", reports)
    record = os.path.join(path, INVENTORY_RECORD)
    if os.path.isfile(record):
        data = _load(record, "inventory record")
        run.inventory = data.get("inventory") if isinstance(data.get("inventory"), str) else None
        run.hosts = [h for h in data.get("hosts") or [] if isinstance(h, str)]
    return run


def _when(report: dict) -> Optional[dt.datetime]:
    text = report.get("generated_at") or (report.get("run") or {}).get("started_at")
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def check_age(run: RunDir, max_age_s: int, now: Optional[dt.datetime] = None) -> None:
    now = now or dt.datetime.now(dt.timezone.utc)
    for host, report in sorted(run.reports.items()):
        when = _when(report)
        if when is None:
            raise FixRefused(f"{run.path}: the report of {host} says no time it was made: verify again")
        age = (now - when).total_seconds()
        if age > max_age_s:
            raise FixRefused(f"{run.path}: the report of {host} is {age / 3600:.1f} h old, older than --max-age "
                             f"{max_age_s // 3600 if max_age_s % 3600 == 0 else max_age_s}"
                             f"{'h' if max_age_s % 3600 == 0 else ' s'}: its findings may no longer be the node's; "
                             "verify again and fix from that run")


def check_source(run: RunDir, inventory: Optional[str], inventory_hosts: Optional[Sequence[str]]) -> str:
    """The inventory to apply with (fleet) and that the run is from it; a local run must be this host's."""
    if run.kind == "local":
        if inventory:
            raise FixRefused(f"{run.path} is a --local run: it is fixed on this host, without -i")
        (host, report), = run.reports.items()
        root = (report.get("run") or {}).get("root")
        if root not in (None, "/"):
            raise FixRefused(f"{run.path} judged the tree {root} (--root), not this host: nothing to apply")
        here = socket.gethostname()
        if host != here:
            raise FixRefused(f"{run.path} is a --local run of {host}, not of this host ({here})")
        return ""
    chosen = inventory or run.inventory
    if not chosen:
        raise FixRefused(f"{run.path} recorded no inventory ({INVENTORY_RECORD}, written by `tunefleet verify -i`): "
                         "name it with -i")
    if run.inventory and os.path.abspath(chosen) != run.inventory:
        raise FixRefused(f"{run.path} is a run of inventory {run.inventory}, not {os.path.abspath(chosen)}")
    if inventory_hosts is not None:
        gone = sorted(set(run.reports) - set(inventory_hosts))
        if gone:
            raise FixRefused(f"{run.path}: host(s) {', '.join(gone)} are not in inventory {chosen}: the run is "
                             "from another inventory")
    return chosen


def findings_of(run: RunDir) -> dict:
    """host -> [Finding] of every FAIL and WARN."""
    found = {}
    for host, report in sorted(run.reports.items()):
        rows = []
        for item in report.get("results") or []:
            if not isinstance(item, dict) or item.get("status") not in FINDING:
                continue
            rows.append(Finding(host, str(item.get("check_id")), str(item["status"]), str(item.get("reason") or ""),
                                item.get("observed"), remedy_of(item)))
        found[host] = rows
    return found


def plan(findings: dict, only_roles: Optional[Sequence[str]] = None) -> list:
    """Per host: the roles whose remedy removes a finding (sorted), the findings they address, and the rest.
    `only_roles` (fix --roles): the operator fixes these roles only; another role's findings are listed, not run."""
    plans = []
    for host, rows in sorted(findings.items()):
        one = HostPlan(host)
        for finding in rows:
            remedy = finding.remedy
            if remedy and remedy.get("kind") == ROLE and remedy.get("fixable") and remedy.get("role"):
                if only_roles is not None and remedy["role"] not in only_roles:
                    one.not_chosen.append(finding)
                    continue
                one.fixes.append(finding)
                if remedy["role"] not in one.roles:
                    one.roles.append(remedy["role"])
            else:
                one.apart.append(finding)
        one.roles.sort()
        plans.append(one)
    return plans


def groups(plans: list) -> list:
    """[(roles, hosts)]: one playbook run per distinct set of roles, so no host runs a role it does not need."""
    by_roles: dict = {}
    for one in plans:
        if one.roles:
            by_roles.setdefault(tuple(one.roles), []).append(one.host)
    return sorted((list(roles), sorted(hosts)) for roles, hosts in by_roles.items())


def render_plan(plans: list, run_dir: str) -> list:
    lines = [f"fix plan for {run_dir}:"]
    for one in plans:
        if one.roles:
            lines.append(f"  {one.host}: roles {', '.join(one.roles)} (site.yml --tags {','.join(one.roles)}) for "
                         f"{len(one.fixes)} finding(s)")
            lines += [f"    {f.status} {f.check_id}: {words(f.remedy)}" for f in one.fixes]
        elif not one.apart and not one.not_chosen:
            lines.append(f"  {one.host}: nothing to fix")
    not_chosen = [f for one in plans for f in one.not_chosen]
    if not_chosen:
        lines.append(f"not run (their roles are not among --roles): {len(not_chosen)} finding(s)")
        lines += [f"  {f.host}: {f.status} {f.check_id}: {words(f.remedy)}" for f in not_chosen]
    apart = [f for one in plans for f in one.apart]
    if apart:
        lines.append("left alone (not a role's to fix; the action each needs):")
        lines += [f"  {f.line()}" for f in apart]
    if not any(one.roles for one in plans):
        lines.append("no finding a role removes: nothing to run")
    return lines


def fleet_end_lines(run_dir: str, inventory: str, hosts: Sequence[str]) -> list:
    """The end of `tunefleet verify -i`: records the inventory the run used (so `tunefleet fix` can refuse a
    run from another one), then how many hosts have fixable findings with the exact fix command, and the
    hosts whose findings no role removes, apart, with their actions."""
    try:
        dir_fd = open_trusted_dir(run_dir)
        try:
            write_in_dir(dir_fd, INVENTORY_RECORD, json.dumps({"inventory": os.path.abspath(inventory),
                                                               "hosts": sorted(hosts)}), PRIVATE_FILE)
        finally:
            os.close(dir_fd)
        plans = plan(findings_of(load_run(run_dir)))
    except (OSError, ValueError) as exc:
        return [f"fix: not planned: {exc}"]
    fixable = [one for one in plans if one.roles]
    lines = []
    if fixable:
        lines.append(f"{len(fixable)} host(s) have findings the roles fix ({', '.join(one.host for one in fixable)}): "
                     f"tunefleet fix {shlex.quote(run_dir)} -i {shlex.quote(inventory)}  (check mode; --apply to "
                     "apply)")
    hardware = [one for one in plans if any((f.remedy or {}).get("kind") != ROLE for f in one.apart)]
    if hardware:
        lines.append(f"{len(hardware)} host(s) have findings no role fixes (left to you):")
        for one in hardware:
            for f in one.apart:
                lines.append(f"  {f.host}: {f.check_id}: {words(f.remedy) if f.remedy else 'read the finding'}")
    return lines
