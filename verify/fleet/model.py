"""Saved node reports, read back on the controller: one NodeReport per host, one LoadError per bad file.

A fleet run leaves `reports/<run-id>/<host>/report.json` (the node's own report) and, next to it,
`crossnode-*.json` files (results of tests that need two hosts: path MTU, RDMA pairs, multi-node
all-reduce). A file that cannot be read costs that file only; the rest of the fleet is still reported.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from verify.bounded_load import MAX_BYTES, BoundedLoadError, loads_json_bytes_bounded, read_bounded
from verify.facts.ib_fabric import ports_from_facts
from verify.fleet.baseline import hardware_of
from verify.payload_schema import schema_problems
from verify.report.schemas import RESULT_SCHEMA, split_problem
from verify.result import CheckResult, Status
from verify.safe_io import for_terminal
from verify.stats.outliers import MEASUREMENT_ROLES
from verify.stats.uniformity import fleet_versions

NODE_REPORT_NAME = "report.json"
CROSSNODE_GLOB = "crossnode-*.json"
# Written by the fleet report itself; never read back as a node report.
ADDRESSES_NAME = "fleet_addresses.json"  # host -> addresses, for blaming path MTU failures
# The fleet report of 10,000 hosts, problems listed per host, stays under this (a node report is ~100 KB).
FLEET_REPORT_MAX_BYTES = 256 << 20
REGRESSIONS_NAME = "fleet_regressions.json"  # written by verify.history for the fleet report
BASELINE_NAME = "fleet_baseline.json"  # `tunefleet baseline`'s default output (verify.fleet.baseline)
FLEET_OUTPUT_NAMES = frozenset({"fleet_report.json", ADDRESSES_NAME, REGRESSIONS_NAME, BASELINE_NAME})
PARALLEL_FROM = 2000
CLEAN = frozenset({Status.PASS.value, Status.SKIP.value})


@dataclass
class NodeReport:
    """One host as the fleet report needs it. A fleet of 10,000 must fit in memory and be read
    in seconds, so a clean result is kept as its status only; full results are kept for the
    ones a person must read (not PASS/SKIP) and for measurements (compared across the fleet)."""

    host: str
    results: list  # CheckResult: problems and measurements
    statuses: dict = field(default_factory=dict)  # check_id -> status value, every result
    versions: dict = field(default_factory=dict)  # flattened version facts (outliers.versions_of)
    source: str = ""
    hardware: str = ""  # the profile it is judged against in a fleet baseline (verify.fleet.baseline)
    damaged: list = field(default_factory=list)  # LoadError per record skipped (it names the field)
    machine: str = ""  # the kernel's boot id (facts.boot_id): hosts sharing one share its devices
    ib_ports: list = field(default_factory=list)  # facts.ib_ports (verify.facts.ib_fabric), for the fabric check

    def add(self, result: CheckResult) -> None:
        self.statuses[result.check_id] = result.status.value
        self.results.append(result)


@dataclass
class LoadError:
    """A file that could not be read (field empty), or one damaged record of it that was skipped while
    the rest of the file was read (field names it: 'results[3].status', 'regressions[0].host')."""

    path: str
    message: str
    field: str = ""

    def to_dict(self) -> dict:
        return {"path": self.path, "message": self.message, **({"field": self.field} if self.field else {})}

    def describe(self) -> str:
        return f"{self.path}: {self.field}: {self.message} (record skipped)" if self.field \
            else f"{self.path}: {self.message}"


class ReportFormatError(ValueError):
    """A node report is readable JSON but not a node report; the message says what is wrong."""


def parse_node_report(data: Any, origin: str, fallback_host: str = "") -> NodeReport:
    """Turn one node report document into a NodeReport, or raise ReportFormatError naming the problem."""
    if not isinstance(data, dict):
        raise ReportFormatError(f"top level must be a JSON object, got {type(data).__name__}")
    raw_results = data.get("results")
    if not isinstance(raw_results, list):
        raise ReportFormatError("no 'results' list")
    facts = data.get("facts") if isinstance(data.get("facts"), dict) else {}
    host = _host_name(data, facts) or fallback_host
    if not host:
        raise ReportFormatError("the report names no host")
    boot_id = facts.get("boot_id")
    node = NodeReport(host=host, results=[], versions=fleet_versions(facts), source=origin,
                      hardware=hardware_of(data, facts),
                      machine=boot_id.strip()[:64] if isinstance(boot_id, str) else "",
                      ib_ports=ports_from_facts(facts.get("ib_ports")))
    for index, item in enumerate(raw_results):
        try:
            _take_result(node, item, index)
        except DamagedRecord as exc:
            node.damaged.append(LoadError(origin, exc.message, exc.field))
    if raw_results and len(node.damaged) == len(raw_results):
        # Not one result readable: this is no node report, and the host is not listed as clean.
        raise ReportFormatError(node.damaged[0].message)
    return node


def parse_crossnode(data: Any, damaged: Optional[list] = None, origin: str = "") -> list:
    """A crossnode file is a list of CheckResult dicts, or {"results": [...]}. A damaged result is
    skipped and, with `damaged` given, recorded there as a LoadError naming its field."""
    if isinstance(data, dict):
        data = data.get("results")
    if not isinstance(data, list):
        raise ReportFormatError("a cross-node file must hold a list of results")
    results = []
    for index, item in enumerate(data):
        try:
            results.append(_parse_result(item, index))
        except DamagedRecord as exc:
            if damaged is not None:
                damaged.append(LoadError(origin, exc.message, exc.field))
    return results


def _take_result(node: NodeReport, item: Any, index: int) -> None:
    """Record one raw result: its status always, the whole result only when it will be read."""
    if isinstance(item, dict) and isinstance(item.get("status"), str) and item["status"] in CLEAN \
            and isinstance(item.get("check_id"), str) and item["check_id"] and not _is_measurement(item):
        node.statuses[item["check_id"]] = item["status"]
        return
    node.add(_parse_result(item, index))


def _is_measurement(item: dict) -> bool:
    details = item.get("details")
    if isinstance(details, dict) and ("value" in details or "curve" in details or "busbw_gbps" in details):
        return True
    role = item.get("role")
    return isinstance(role, str) and role in MEASUREMENT_ROLES


def load_fleet_dir(directory: str, workers: Optional[int] = None) -> tuple:
    """(nodes sorted by host, load errors) for every node report under directory.

    Decoding JSON is most of the cost of a big fleet, so above PARALLEL_FROM reports the files
    are read by one process per CPU; each returns slim NodeReports, not the raw documents.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{directory}: not a directory")
    paths = _node_report_paths(root)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers > 1 and len(paths) >= PARALLEL_FROM:
        from concurrent.futures import ProcessPoolExecutor

        chunks = [paths[i::workers] for i in range(workers)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            loaded = [item for part in pool.map(_load_paths, chunks, [root] * workers) for item in part]
    else:
        loaded = _load_paths(paths, root)
    nodes: dict = {}
    errors: list = []
    for item in sorted(loaded, key=lambda i: i.source if isinstance(i, NodeReport) else i.path):
        if isinstance(item, LoadError):
            errors.append(item)
        elif item.host in nodes:
            errors.append(LoadError(item.source, f"host {item.host!r} already reported by {nodes[item.host].source}"))
        else:
            nodes[item.host] = item
    return [nodes[h] for h in sorted(nodes)], errors


def load_fleet_dir_for(command: str, directory: str, note: str = "") -> Optional[tuple]:
    """load_fleet_dir for a CLI command: every load error said on stderr under the command's name
    (`note` after each), and None, after saying why, when there is no node to work with."""
    try:
        nodes, errors = load_fleet_dir(directory)
    except FileNotFoundError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    for error in errors:
        print(f"{command}: WARN {for_terminal(error.describe())}{note}", file=sys.stderr)
    if not nodes:
        print(f"{command}: no readable node report under {directory}", file=sys.stderr)
        return None
    return nodes, errors


def _load_paths(paths: list, root: Path) -> list:
    """NodeReport or LoadError per path, cross-node results attached (errors of those appended)."""
    out: list = []
    for path in paths:
        fallback = path.parent.name if path.name == NODE_REPORT_NAME else path.stem
        try:
            node = parse_node_report(_read_json(path), str(path), fallback_host=fallback)
        except (OSError, ValueError) as exc:
            out.append(LoadError(str(path), _describe(exc)))
            continue
        out.extend(node.damaged)
        node.damaged = []  # said once, as load errors
        if path.name == NODE_REPORT_NAME and path.parent.parent == root:
            # <run>/<inventory name>/report.json: the name the operator, the pairing and the
            # address map use, even where the node's own hostname differs.
            node.host = path.parent.name
        _attach_crossnode(node, path.parent if path.name == NODE_REPORT_NAME else None, out)
        out.append(node)
    return out


def _node_report_paths(root: Path) -> list:
    paths = sorted(root.glob(f"*/{NODE_REPORT_NAME}"))
    if (root / NODE_REPORT_NAME).is_file():
        # One node's report directory (`tunefleet verify --local --out DIR`, `make demo`): the other JSON
        # files beside its report.json are that run's own (state-before.json), never more hosts.
        return [root / NODE_REPORT_NAME, *paths]
    if paths:
        # A fleet run directory (<run>/<host>/report.json): the JSON files beside the host directories are the
        # controller's own (crossnode-records.json, inventory.json, ...), never more hosts. Read as reports, a
        # clean `verify -i` ended 3 on crossnode-records.json (found by molecule/fix).
        return paths
    # A flat directory of <host>.json files (e.g. collected by another tool) works too.
    return [p for p in sorted(root.glob("*.json"))
            if p.name not in FLEET_OUTPUT_NAMES | {NODE_REPORT_NAME} and not p.match(CROSSNODE_GLOB)]


def _attach_crossnode(node: NodeReport, host_dir: Optional[Path], errors: list) -> None:
    if host_dir is None:
        return
    for path in sorted(host_dir.glob(CROSSNODE_GLOB)):
        try:
            for result in parse_crossnode(_read_json(path), errors, str(path)):
                node.add(result)
        except (OSError, ValueError) as exc:
            errors.append(LoadError(str(path), _describe(exc)))


def _read_json(path: Path) -> Any:
    # The caller names the path once (LoadError.path): the message says what, not where.
    return json_loads(read_bounded(str(path), MAX_BYTES + 1, "node report"), "node report")


def json_loads(data: bytes, origin: str = "file") -> Any:
    """A file tunefleet wrote, decoded through the bounded loader (size and depth refused by name);
    BoundedLoadError, a ValueError, on bad input."""
    if len(data) > MAX_BYTES:
        raise BoundedLoadError(f"{origin} is larger than {MAX_BYTES} bytes: refused")
    return loads_json_bytes_bounded(data, origin)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return str(exc)


class DamagedRecord(ReportFormatError):
    """One result of a file is not a result; field names where ('results[3].status')."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _parse_result(item: Any, index: int) -> CheckResult:
    """One result, checked against the node report's result schema (verify.report.schemas.RESULT_SCHEMA);
    DamagedRecord naming the first field that differs."""
    where = f"results[{index}]"
    problems = schema_problems(item, RESULT_SCHEMA, where)
    if problems:
        field, message = split_problem(problems[0])
        check_id = item.get("check_id") if isinstance(item, dict) else None
        named = f"{where} ({check_id[:80]})" if isinstance(check_id, str) and check_id else where
        raise DamagedRecord(field, f"{named}: {field[len(where) + 1:] or 'the result'}: {message}")
    return CheckResult.from_dict(item)


def _host_name(data: dict, facts: dict) -> str:
    for candidate in (data.get("host"), facts.get("host"), facts.get("hostname")):
        if isinstance(candidate, str) and candidate:
            return candidate
        if isinstance(candidate, dict):
            name = candidate.get("name") or candidate.get("hostname")
            if isinstance(name, str) and name:
                return name
    return ""
