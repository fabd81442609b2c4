"""Saved node reports, read back on the controller: one NodeReport per host, one LoadError per bad file.

A fleet run leaves `reports/<run-id>/<host>/report.json` (the node's own report) and, next to it,
`crossnode-*.json` files (results of tests that need two hosts: path MTU, RDMA pairs, multi-node
all-reduce). A file that cannot be read costs that file only; the rest of the fleet is still reported.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from verify.result import CheckResult, Status

NODE_REPORT_NAME = "report.json"
CROSSNODE_GLOB = "crossnode-*.json"
# Written by the fleet report itself; never read back as a node report.
FLEET_OUTPUT_NAMES = frozenset({"fleet_report.json"})


@dataclass
class NodeReport:
    host: str
    results: list
    facts: dict = field(default_factory=dict)
    source: str = ""

    @property
    def worst(self) -> Status:
        from verify.result import STATUS_ORDER

        if not self.results:
            return Status.SKIP
        return min((r.status for r in self.results), key=lambda s: STATUS_ORDER[s])


@dataclass
class LoadError:
    path: str
    message: str

    def to_dict(self) -> dict:
        return {"path": self.path, "message": self.message}


class ReportFormatError(ValueError):
    """A node report is readable JSON but not a node report; the message says what is wrong."""


def parse_node_report(data: Any, origin: str, fallback_host: str = "") -> NodeReport:
    """Turn one node report document into a NodeReport, or raise ReportFormatError naming the problem."""
    if not isinstance(data, dict):
        raise ReportFormatError(f"top level must be a JSON object, got {type(data).__name__}")
    raw_results = data.get("results")
    if not isinstance(raw_results, list):
        raise ReportFormatError("no 'results' list")
    results = [_parse_result(item, index) for index, item in enumerate(raw_results)]
    facts = data.get("facts") if isinstance(data.get("facts"), dict) else {}
    host = _host_name(data, facts) or fallback_host
    if not host:
        raise ReportFormatError("the report names no host")
    return NodeReport(host=host, results=results, facts=facts, source=origin)


def parse_crossnode(data: Any) -> list:
    """A crossnode file is a list of CheckResult dicts, or {"results": [...]}."""
    if isinstance(data, dict):
        data = data.get("results")
    if not isinstance(data, list):
        raise ReportFormatError("a cross-node file must hold a list of results")
    return [_parse_result(item, index) for index, item in enumerate(data)]


def load_fleet_dir(directory: str) -> tuple:
    """(nodes sorted by host, load errors) for every node report under directory."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{directory}: not a directory")
    nodes: dict = {}
    errors: list = []
    for path in _node_report_paths(root):
        fallback = path.parent.name if path.name == NODE_REPORT_NAME else path.stem
        try:
            node = parse_node_report(_read_json(path), str(path), fallback_host=fallback)
        except (OSError, ValueError) as exc:
            errors.append(LoadError(str(path), _describe(exc)))
            continue
        if node.host in nodes:
            errors.append(LoadError(str(path), f"host {node.host!r} already reported by {nodes[node.host].source}"))
            continue
        nodes[node.host] = node
        _attach_crossnode(node, path.parent if path.name == NODE_REPORT_NAME else None, errors)
    return [nodes[h] for h in sorted(nodes)], errors


def _node_report_paths(root: Path) -> list:
    paths = sorted(root.glob(f"*/{NODE_REPORT_NAME}"))
    if (root / NODE_REPORT_NAME).is_file():
        paths.insert(0, root / NODE_REPORT_NAME)
    # A flat directory of <host>.json files (e.g. collected by another tool) works too.
    paths.extend(p for p in sorted(root.glob("*.json")) if p.name not in FLEET_OUTPUT_NAMES | {NODE_REPORT_NAME})
    return paths


def _attach_crossnode(node: NodeReport, host_dir: Optional[Path], errors: list) -> None:
    if host_dir is None:
        return
    for path in sorted(host_dir.glob(CROSSNODE_GLOB)):
        try:
            node.results.extend(parse_crossnode(_read_json(path)))
        except (OSError, ValueError) as exc:
            errors.append(LoadError(str(path), _describe(exc)))


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return str(exc)


def _parse_result(item: Any, index: int) -> CheckResult:
    if not isinstance(item, dict):
        raise ReportFormatError(f"results[{index}] is not an object")
    try:
        return CheckResult.from_dict(item)
    except KeyError as exc:
        raise ReportFormatError(f"results[{index}] has no {exc.args[0]!r}") from exc
    except (ValueError, TypeError) as exc:
        raise ReportFormatError(f"results[{index}] ({item.get('check_id', '?')}): {exc}") from exc


def _host_name(data: dict, facts: dict) -> str:
    for candidate in (data.get("host"), facts.get("host"), facts.get("hostname")):
        if isinstance(candidate, str) and candidate:
            return candidate
        if isinstance(candidate, dict):
            name = candidate.get("name") or candidate.get("hostname")
            if isinstance(name, str) and name:
                return name
    return ""
