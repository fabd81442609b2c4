"""The InfiniBand fabric as its tools print it, and this node's HCA ports as the fabric names them.

`ibqueryerrors` (rdma-core infiniband-diags, run on one node with fabric access) prints, for every node of
the fabric with a port counter above its threshold (0 by default), a header and one line per such port
(infiniband-diags/ibqueryerrors.c print_results):

    Errors for 0x2c903006e29b0 "MF0;ys23ib4:SX6036/U1"          <- a switch: its GUID and node description
       GUID 0x2c903006e29b0 port 5: [SymbolErrorCounter == 65535] [LinkDownedCounter == 2] ...
    Errors for "rd240 mlx4_0"                                      <- a CA (an HCA): its node description
       GUID 0xe41d2d0300e0bae1 port 1: [PortXmitWait == 4294967295]

Extended counters add the figure in human units (`[LinkDownedCounter == 25 (25.000)]`); a switch that
answers for all its ports at once prints `port ALL`. With `-r` (`--report-port`, print_port_config) each
port line is followed by the link it is on, the far end named by port GUID, LID, port and node description:

           Link info:      4   17[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>  0x0011220300334455      5    1[  ]
           "node01 mlx5_0" ( )                                  (one line as printed, folded here)

and at the end `## Summary: N nodes checked, M bad nodes found` / `## P ports checked, Q ports have errors
beyond threshold` (a capture without it was cut short). A port not listed had every counter at 0.

`ibdiagnet` ends its run with a table of its stages (`-I- Stage  Warnings  Errors  Comment`, one
`-I- <stage>  <warnings>  <errors>  [comment]` row each; NVIDIA ibdiagnet User Manual).

Every parser here is total: any text gives a result (lines it cannot read are counted, never raised), and
every number is bounded before int().
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from verify.facts.ib_counters import PERFQUERY_TO_SYSFS
from verify.node import Node

MAX_PORTS = 100_000  # a 10,000-node fabric with every port erroring; more lines than this are not read
MAX_NAME = 200  # a node description is at most 64 bytes (IBA NodeDescription)
MAX_HCA_PORTS = 256  # per node report
GUID_DIGITS = 16
# The counters ibqueryerrors prints that are no error: data, packets and transmit wait (congestion ticks,
# "not really an error", infiniband-exporter's maintainer in guilbaults/infiniband-exporter#12).
NOT_ERRORS = ("PortXmitWait",)

_HEADER = re.compile(r'^Errors for (?:0x([0-9a-fA-F]{1,16}) )?"(.{0,200})"\s*$', re.ASCII)
_PORT = re.compile(r"^\s+GUID 0x([0-9a-fA-F]{1,16}) port (ALL|\d{1,3}):(.*)$", re.ASCII)
_COUNTER = re.compile(r"\[([A-Za-z0-9]{1,40}) == (\d{1,20})(?: \([^)\]]{0,20}\))?\]", re.ASCII)
_LINK = re.compile(
    r"^\s+Link info:\s+(\d{1,5})\s+(\d{1,3})\[[ 0-9]{0,3}\]\s+==\((.{0,80})\)==>\s+"
    r'(?:0x([0-9a-fA-F]{1,16})\s+(\d{1,5})\s+(\d{1,3})\[[ 0-9]{0,3}\]\s+"(.{0,200})"|\[\s*\]\s*"")', re.ASCII)
_SUMMARY_NODES = re.compile(r"^## Summary: (\d{1,9}) nodes checked, (\d{1,9}) bad nodes found", re.ASCII)
_SUMMARY_PORTS = re.compile(r"^##\s+(\d{1,9}) ports checked, (\d{1,9}) ports have errors beyond threshold", re.ASCII)
_PMA_FAILURES = re.compile(r"^##\s+(\d{1,9}) PMA query failures", re.ASCII)
_STAGE = re.compile(r"^-I- (\S.{0,40}?)\s{2,}(\d{1,9})\s+(\d{1,9})(?:\s+(.{0,200}))?$", re.ASCII)
_STAGE_HEADER = re.compile(r"^-I- Stage\s+Warnings\s+Errors", re.ASCII)
_HEX_GROUPS = re.compile(r"^[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){3,7}$", re.ASCII)


def guid_key(text: object) -> Optional[int]:
    """A GUID as a number, from '0x7cfe900300179b31' (the tools), '7cfe:9003:0017:9b31' (sysfs node_guid) or a
    GID 'fe80:0000:0000:0000:7cfe:9003:0017:9b31' (its low 64 bits, the port GUID); None for anything else."""
    if not isinstance(text, str):
        return None
    value = text.strip()
    if value.lower().startswith("0x") and 2 < len(value) <= 2 + GUID_DIGITS:
        digits = value[2:]
    elif _HEX_GROUPS.match(value):
        groups = value.split(":")
        digits = "".join(g.rjust(4, "0") for g in groups[-4:])
    else:
        return None
    if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits):
        return None
    number = int(digits, 16)
    return number or None  # a zero GUID is a port without one (a Down RoCE port), never a name


def guid_text(number: int) -> str:
    return f"0x{number:016x}"


@dataclass
class LinkInfo:
    """The link of one port, as `ibqueryerrors -r` prints it."""

    state: str  # "Active", "Down", ...
    phys_state: str  # "LinkUp", "Polling", ...
    remote_guid: Optional[int]  # the far end's port GUID; None when nothing is attached
    remote_port: Optional[int]
    remote_name: str  # the far end's node description

    def to_dict(self) -> dict:
        return {"state": self.state, "phys_state": self.phys_state,
                "remote_guid": guid_text(self.remote_guid) if self.remote_guid else None,
                "remote_port": self.remote_port, "remote_name": self.remote_name}


@dataclass
class FabricPort:
    """One port line: the node it belongs to, its counters (sysfs names, as verify.checks.health_ib judges
    them), the counters that are no error, and the link where `-r` printed it."""

    node_name: str
    switch: bool
    node_guid: Optional[int]  # printed for switches only
    port_guid: int
    port: Optional[int]  # None: "port ALL" (a switch's sum over its ports)
    counters: dict = field(default_factory=dict)
    other: dict = field(default_factory=dict)  # PortXmitWait, VL15Dropped and names perfquery has no file for
    link: Optional[LinkInfo] = None

    @property
    def key(self) -> str:
        return f"{guid_text(self.port_guid)}/{'ALL' if self.port is None else self.port}"

    def to_dict(self) -> dict:
        return {"node_name": self.node_name, "switch": self.switch,
                "node_guid": guid_text(self.node_guid) if self.node_guid else None,
                "port_guid": guid_text(self.port_guid), "port": self.port, "counters": dict(self.counters),
                "other": dict(self.other), "link": self.link.to_dict() if self.link else None}


@dataclass
class FabricErrors:
    """A whole `ibqueryerrors` output. complete: its summary was printed (a port not listed is clean)."""

    ports: list = field(default_factory=list)
    complete: bool = False
    nodes_checked: Optional[int] = None
    ports_checked: Optional[int] = None
    bad_ports: Optional[int] = None
    pma_failures: int = 0
    unreadable_lines: int = 0  # port-like lines it could not read
    why_unreadable: str = ""  # set when nothing in the text is ibqueryerrors' (then ports is empty)


def parse_ibqueryerrors(text: str) -> FabricErrors:
    """`ibqueryerrors [-r]` output -> FabricErrors. Total on any text."""
    found = FabricErrors()
    header: Optional[tuple] = None  # (switch, node GUID, name)
    last: Optional[FabricPort] = None
    recognised = False
    for line in text.splitlines():
        if len(found.ports) >= MAX_PORTS:
            found.unreadable_lines += 1
            continue
        match = _HEADER.match(line)
        if match:
            recognised = True
            guid = guid_key("0x" + match.group(1)) if match.group(1) else None
            header = (match.group(1) is not None, guid, match.group(2))
            last = None
            continue
        match = _PORT.match(line)
        if match:
            recognised = True
            last = _port_line(match, header)
            if last is None:
                found.unreadable_lines += 1
            else:
                found.ports.append(last)
            continue
        match = _LINK.match(line)
        if match:
            recognised = True
            if last is not None and last.link is None:
                last.link = _link(match)
            else:
                found.unreadable_lines += 1
            continue
        recognised = _summary_line(line, found) or recognised
        if line.lstrip().startswith(("GUID 0x", "Link info:")):
            found.unreadable_lines += 1
    if not recognised:
        found.why_unreadable = "no 'Errors for' block and no '## Summary' line: not ibqueryerrors output"
    return found


def _summary_line(line: str, found: FabricErrors) -> bool:
    match = _SUMMARY_NODES.match(line)
    if match:
        found.complete = True
        found.nodes_checked = int(match.group(1))
        return True
    match = _SUMMARY_PORTS.match(line)
    if match:
        found.ports_checked, found.bad_ports = int(match.group(1)), int(match.group(2))
        return True
    match = _PMA_FAILURES.match(line)
    if match:
        found.pma_failures = int(match.group(1))
        return True
    return False


def _port_line(match: re.Match, header: Optional[tuple]) -> Optional[FabricPort]:
    port_guid = guid_key("0x" + match.group(1))
    if port_guid is None or header is None:
        return None  # a port line outside any node block names no node
    switch, node_guid, name = header
    port = None if match.group(2) == "ALL" else int(match.group(2))
    item = FabricPort(name, switch, node_guid, port_guid, port)
    for counter in _COUNTER.finditer(match.group(3)):
        name_, count = counter.group(1), int(counter.group(2))
        sysfs = PERFQUERY_TO_SYSFS.get(name_)
        if sysfs is not None and name_ not in NOT_ERRORS:
            item.counters[sysfs] = count
        else:
            item.other[name_] = count
    return item


def _link(match: re.Match) -> LinkInfo:
    states = match.group(3).split()
    state_text = states[-1] if states else ""
    state, _, phys = state_text.partition("/")
    if not phys and len(states) >= 2 and states[-2].endswith("/"):
        state, phys = states[-2].rstrip("/"), states[-1]  # "Active/  LinkUp": the two words apart
    remote = guid_key("0x" + match.group(4)) if match.group(4) else None
    return LinkInfo(state.strip(), phys.strip(), remote, int(match.group(6)) if match.group(6) else None,
                    (match.group(7) or "").strip())


@dataclass
class IbdiagnetStage:
    stage: str
    warnings: int
    errors: int
    comment: str = ""


def parse_ibdiagnet_summary(text: str) -> list:
    """The stage table ibdiagnet prints at the end of its run -> [IbdiagnetStage]; [] when the text holds
    none (a run cut short, or not ibdiagnet). Total on any text."""
    stages: list = []
    inside = False
    for line in text.splitlines():
        if _STAGE_HEADER.match(line):
            inside, stages = True, []  # the last table printed is the run's
            continue
        if not inside:
            continue
        match = _STAGE.match(line.rstrip())
        if match is None:
            if line.strip():
                inside = False  # the table ends at the first line that is no stage row
            continue
        stages.append(IbdiagnetStage(match.group(1).strip(), int(match.group(2)), int(match.group(3)),
                                     (match.group(4) or "").strip()))
    return stages


def port_identities(node: Node) -> list:
    """This node's HCA ports as the fabric names them: [{"port": "mlx5_0/1", "port_guid", "node_guid",
    "node_desc"}] from /sys/class/infiniband (<dev>/node_guid, <dev>/node_desc, <dev>/ports/<n>/gids/0: the
    low 64 bits of GID 0 are the port GUID). The fleet's fabric check joins `ibqueryerrors` lines on them."""
    ports = []
    for device in node.listdir("/sys/class/infiniband")[:MAX_HCA_PORTS]:
        base = f"/sys/class/infiniband/{device}"
        node_guid = guid_key(node.read_value(f"{base}/node_guid"))
        desc = (node.read_value(f"{base}/node_desc") or "")[:MAX_NAME]
        for port in node.listdir(f"{base}/ports"):
            if len(ports) >= MAX_HCA_PORTS:
                break
            port_guid = guid_key(node.read_value(f"{base}/ports/{port}/gids/0"))
            ports.append({"port": f"{device}/{port}", "port_guid": guid_text(port_guid) if port_guid else None,
                          "node_guid": guid_text(node_guid) if node_guid else None, "node_desc": desc})
    return ports


def ports_from_facts(value: object) -> list:
    """The `ib_ports` fact of a node report, kept only where well formed (a fleet reads reports it did not
    write). Total: anything else gives []."""
    kept = []
    for item in value if isinstance(value, list) else []:
        if len(kept) >= MAX_HCA_PORTS:
            break
        if not isinstance(item, dict) or not isinstance(item.get("port"), str) or not item["port"]:
            continue
        desc = item.get("node_desc")
        kept.append({"port": item["port"][:MAX_NAME], "port_guid": guid_key(item.get("port_guid")),
                     "node_guid": guid_key(item.get("node_guid")),
                     "node_desc": desc[:MAX_NAME] if isinstance(desc, str) else ""})
    return kept
