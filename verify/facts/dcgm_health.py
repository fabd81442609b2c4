"""DCGM's background health watches as `dcgmi health -c` prints them (the node's own nv-hostengine, its watches
set by whoever runs DCGM there: tunefleet reads them, never sets or clears them).

The report is DCGM's output tree (NVIDIA/DCGM dcgmi/Health.cpp, GenerateOutputFromResponse / HandleOneEntity):

    | Overall Health            | Warning                                                    |
    | GPU                       |                                                            |
    | -> 0                      | Warning                                                    |
    |    -> Errors              |                                                            |
    |       -> PCIe system      | Warning                                                    |
    |                           | Detected more than 8 PCIe replays per minute for GPU 0 :   |

an entity group ("GPU", "NvSwitch", "ConnectX", ...), each entity "-> <id>" with its health, under "-> Errors"
each system "-> <name>" with its health and its messages wrapped on the lines below. Health words are DCGM's
HelperHealthToString: Healthy, Warning, Failure (and "Internal error"). The parser keys on the '|' cells and the
arrows' depth, never on column widths. Total: any text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from verify.node import Node

ARGV = ["dcgmi", "health", "-c"]
HEALTH_WORDS = ("healthy", "warning", "failure")
MAX_LINES = 20_000
# What dcgmi prints where there is nothing to judge (Health.cpp CheckWatches; dcgmi's connection error).
NOT_SET = "Health watches not enabled"
NO_ENGINE = ("Unable to connect to host engine", "unable to establish a connection")


@dataclass
class Incident:
    system: str  # "PCIe system", "Memory system", "Driver", ...
    health: str  # as printed
    message: str = ""


@dataclass
class Entity:
    group: str  # "GPU", "NvSwitch", ...
    entity_id: str
    health: str
    incidents: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.group.lower().replace(' ', '')}{self.entity_id}"


@dataclass
class HealthReport:
    overall: Optional[str]  # None: no "Overall Health" line (not a health report)
    entities: list = field(default_factory=list)


def _cells(line: str):
    parts = line.split("|")
    if len(parts) != 4 or parts[0].strip() or parts[3].strip():
        return None
    return parts[1], parts[2].strip()


def parse(text: str) -> HealthReport:
    report = HealthReport(None)
    group, entity, incident, entity_depth = "", None, None, None
    for number, line in enumerate((text or "").splitlines()):
        if number >= MAX_LINES:
            break
        cells = _cells(line)
        if cells is None:
            continue
        left, value = cells
        name = left.strip()
        if name == "Overall Health":
            report.overall = value
        elif not name:
            if incident is not None and value:
                incident.message = f"{incident.message} {value}".strip()
        elif name.startswith("->"):
            label = name[2:].strip()
            depth = len(left) - len(left.lstrip())
            if label == "Errors":
                continue
            if entity is None or entity_depth is None or depth <= entity_depth:
                entity, incident, entity_depth = Entity(group, label, value), None, depth
                report.entities.append(entity)
            else:
                incident = Incident(label, value)
                entity.incidents.append(incident)
        else:
            group, entity, incident, entity_depth = name, None, None, None
    return report


def read(node: Node) -> tuple:
    """(HealthReport or None, why not): the node's DCGM health check, or why there is none to judge."""
    out = node.run(ARGV, timeout_s=30.0)
    text = f"{out.stdout or ''}\n{out.stderr or ''}"
    if out.missing:
        return None, "dcgmi is not installed (DCGM's health watches need NVIDIA DCGM)"
    if any(marker.lower() in text.lower() for marker in NO_ENGINE):
        return None, "no DCGM host engine answers (nv-hostengine is not running)"
    if NOT_SET.lower() in text.lower():
        return None, "DCGM's health watches are not set on this node (whoever runs DCGM sets them: dcgmi health -s a)"
    return parse(out.stdout or ""), "" if out.ok else f"dcgmi health -c exited {out.returncode}"
