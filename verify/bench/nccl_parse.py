"""Pure parsers for NCCL all-reduce output: nccl-tests text and NCCL_DEBUG=INFO lines.

Each parser returns its result or raises NcclParseError naming the line; nothing else. Numbers
are read as ASCII only (re.ASCII): '²' is a digit to str.isdigit() but not to int().
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

# Launchers prefix every line: srun "0: ", mpirun "[1,0]<stdout>:".
_PREFIX = re.compile(r"^(?:\s*\d+:\s|\[\d+,\d+\]<std(?:out|err)>:)", re.ASCII)
_ROW = re.compile(r"^\s*(\d{1,20})\s+(\d{1,20})\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.*)$", re.ASCII)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d{1,20})\s+(OK|FAILED)", re.ASCII)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_RANK = re.compile(
    r"^#\s+Rank\s+(\d{1,9})\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d{1,9})\s+\[([^\]]*)\]\s*(.*)$",
    re.ASCII,
)
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)\s+nccl-headers=(\d+)\s+nccl-library=(\d+)")
# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM" (a process per rank); "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"
# (every rank in one process, torch.cuda.nccl: NCCL 2.28.9 on 4x H200, tests/fixtures/bench/README.md); "Channel
# 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0" across nodes, the rank's GPU as a bus id ("1[2a000]") before 2.19,
# and NCCL 2.4's "Ring 00 : 43 -> 44 [receive] via NET/Socket/0" (tests/fixtures/nccl_transport/README.md).
_CHANNEL = re.compile(r"^(?:Channel|Ring)\s+\d+(?:/\d+)?\s*:\s*\d+(?:\[[^\]]*\])?\s*->\s*\d+(?:\[[^\]]*\])?\s*"
                      r"(?:\[\w+\]\s*)?via\s+(\S.*?)\s*$", re.ASCII)
# The NET plugin a communicator got: "Using network Socket" (every version), "Initialized NET plugin Socket" and
# "Assigned NET plugin Socket to comm" (2.26 and later); "Failed to initialize NET plugin IB" names one it did not.
_NETWORK = re.compile(r"^(?:Using network|Initialized NET plugin|Assigned NET plugin)\s+(\S.*?)(?:\s+to comm)?\s*$")
# A NET plugin's devices: "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB/SHARP [RO]; OOB eth0:10.0.0.1<0>",
# "NET/Socket : Using [0]lo:127.0.0.1<0> [1]veth0:fe80::1%veth0<0>", merged NICs (2.19 and later)
# "[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}"; "NET/IB : No device found."
_NET_USING = re.compile(r"^NET/([^:/\s]+)\s*:\s*Using\b(.*)$")
_MERGED_DEVICE = re.compile(r"\[(\d{1,4})\]=\{([^}]*)\}", re.ASCII)
_DEVICE = re.compile(r"\[(\d{1,4})\]\s*([^\s\[\]{},;]+)", re.ASCII)
# Which NET plugin library NCCL loaded: an external one ("NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)",
# "Successfully loaded external network plugin /path/libnccl-net.so", "Plugin Path : /opt/.../libnccl-net.so") or
# its own ("NET/Plugin : No plugin found, using internal implementation", "NET/Plugin: Using internal network
# plugin.", "NET/Plugin: Could not find: libnccl-net.so").
_PLUGIN_EXTERNAL = re.compile(r"^(?:NET/Plugin\s*:\s*Loaded net plugin\s+(.+?)(?:\s+\(v\d+\))?|Successfully loaded "
                              r"external (?:network )?plugin\s+(\S+)|Plugin Path\s*:\s*(\S+))\s*$")
_PLUGIN_INTERNAL = re.compile(r"^NET/Plugin\s*:.*(?:using internal|Using internal|No plugin found|Could not find)")
_NET_ABSENT = re.compile(r"^(NET/\S+\s*:\s*No device found\.?|Failed to (?:initialize|load) NET plugin\s+\S.*)$")
_NCCL_VERSION = re.compile(r"NCCL version\s+([\d.]+)")


class NcclParseError(ValueError):
    """nccl-tests / nvidia-smi output that cannot be read; the message names the line."""


def _count(text: str) -> Optional[int]:
    """A #wrong column: a plain ASCII count, else None ('N/A', '²')."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _number(text: str) -> Optional[float]:
    """A figure as printed; 'nan' and 'inf' are kept (judging refuses them), words are None."""
    try:
        return float(text) if text.isascii() else None
    except ValueError:
        return None


@dataclass
class CurvePoint:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_us: Optional[float]
    algbw_gbps: Optional[float]
    busbw_gbps: Optional[float]
    wrong: Optional[int]
    inplace_busbw_gbps: Optional[float] = None
    inplace_wrong: Optional[int] = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class NcclTestsRun:
    points: list = field(default_factory=list)
    ranks: list = field(default_factory=list)  # (rank, host, device index, bus id, gpu name)
    out_of_bounds: Optional[int] = None
    out_of_bounds_ok: Optional[bool] = None
    footers: int = 0
    avg_busbw_gbps: Optional[float] = None
    version: Optional[str] = None

    @property
    def rank_count(self) -> int:
        return len(self.ranks)


def strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line, count=1)


def parse_nccl_tests(text: str) -> NcclTestsRun:
    """Everything nccl-tests printed: the curve (out-of-place and in-place), ranks, footers."""
    run = NcclTestsRun()
    for raw in text.splitlines():
        line = strip_prefix(raw).rstrip()
        rank = _RANK.match(line)
        if rank:
            run.ranks.append(
                (int(rank.group(1)), rank.group(4), int(rank.group(5)), rank.group(6), rank.group(7).strip())
            )
            continue
        oob = _OOB.match(line)
        if oob:
            run.out_of_bounds = int(oob.group(1))
            run.out_of_bounds_ok = oob.group(2) == "OK"
            continue
        avg = _AVG.match(line)
        if avg:
            run.footers += 1
            run.avg_busbw_gbps = _number(avg.group(1))
            continue
        version = _VERSION.match(line)
        if version:
            run.version = version.group(1)
            continue
        if line.startswith("#"):
            continue
        row = _ROW.match(line)
        if not row:
            continue
        values = row.group(6).split()
        # out-of-place time algbw busbw #wrong, then in-place time algbw busbw #wrong (-I adds more)
        if len(values) < 4:
            continue
        point = CurvePoint(
            size_bytes=int(row.group(1)),
            count=int(row.group(2)),
            dtype=row.group(3),
            redop=row.group(4),
            time_us=_number(values[0]),
            algbw_gbps=_number(values[1]),
            busbw_gbps=_number(values[2]),
            wrong=_count(values[3]),
        )
        if len(values) >= 8:
            point.inplace_busbw_gbps = _number(values[6])
            point.inplace_wrong = _count(values[7])
        run.points.append(point)
    return run


@dataclass
class NcclTransport:
    """What NCCL said it used, from NCCL_DEBUG=INFO lines."""

    paths: dict = field(default_factory=dict)  # "P2P/CUMEM/read" -> channel count
    # The network plugin NCCL loaded ("Using network Socket" is normal on a node with no HCA:
    # it is only what inter-node traffic would use). What a channel actually rode is in `paths`.
    networks: list = field(default_factory=list)
    gdr: Optional[bool] = None
    nvls: Optional[bool] = None
    nccl_version: Optional[str] = None
    info_lines: int = 0
    # Each NET plugin's devices by index, as NCCL listed them: {"IB": {0: "mlx5_0:1/RoCE"}, "Socket": {0: "lo"}}.
    net_devices: dict = field(default_factory=dict)
    # What NCCL said it could not use ("NET/IB : No device found.", "Failed to initialize NET plugin IB").
    net_absent: list = field(default_factory=list)
    # Channel lines that could not be read (counted, never skipped in silence).
    unplaced: int = 0
    # The NET plugin library: "internal" (NCCL's own Socket and IB) or what NCCL named of an external one.
    plugin_library: Optional[str] = None

    @property
    def kinds(self) -> list:
        """Coarse transport names: P2P, SHM, NET/IB, NET/IB+GDR, NET/Socket, ..."""
        found = []
        for path in self.paths:
            head = path.split("/")
            if head[0] == "NET" and len(head) > 1:
                name = f"NET/{head[1]}"
                if "GDRDMA" in path:
                    name += "+GDR"
            else:
                name = head[0]
            if name not in found:
                found.append(name)
        return found

    @property
    def socket_fallback(self) -> bool:
        return any(k.startswith("NET/Socket") for k in self.kinds)

    def to_dict(self) -> dict:
        return {
            "kinds": self.kinds,
            "paths": self.paths,
            "networks": self.networks,
            "gdr": self.gdr,
            "nvls": self.nvls,
            "nccl_version": self.nccl_version,
            "info_lines": self.info_lines,
            "net_devices": {plugin: {str(i): name for i, name in devices.items()}
                            for plugin, devices in self.net_devices.items()},
            "net_absent": self.net_absent,
            "unplaced": self.unplaced,
            "plugin_library": self.plugin_library,
        }


def message_body(line: str) -> Optional[str]:
    """The text after NCCL's "NCCL INFO " marker, whatever wraps it: NCCL's own "host:pid:tid [dev]", a
    timestamp, a launcher's "[rank0]:", "[default0]:", "0: " or "[1,0]<stdout>:". The last marker counts: two
    processes writing one stream can glue a cut record before a whole one. None: no INFO record."""
    if "NCCL INFO" not in line:
        return None
    return line.rsplit("NCCL INFO", 1)[1].strip()


def _devices(listed: str) -> dict:
    """{index: device} from a "NET/<plugin> : Using ..." list: an HCA port as NCCL names it ("mlx5_0:1/RoCE"),
    a netdev by name ("lo" from "lo:127.0.0.1<0>"), merged NICs joined with "+"."""
    listed = listed.split("; OOB", 1)[0]
    found = {}
    for index, members in _MERGED_DEVICE.findall(listed):
        found[int(index)] = "+".join(_device_name(name) for _, name in _DEVICE.findall(members))
    for index, name in _DEVICE.findall(_MERGED_DEVICE.sub(" ", listed)):
        found.setdefault(int(index), _device_name(name))
    return found


def _device_name(text: str) -> str:
    # A socket device is "ifname:address<port>"; an HCA port "mlx5_0:1/RoCE" keeps its port and link layer.
    return text if "/" in text else text.split(":", 1)[0]


def parse_nccl_debug(text: str) -> NcclTransport:
    """Transport facts from `NCCL INFO` lines (NCCL_DEBUG=INFO, subsystems INIT,ENV,NET)."""
    found = NcclTransport()
    for raw in text.splitlines():
        if "NCCL INFO" not in raw and "NCCL version" not in raw:
            continue
        line = message_body(raw) or ""
        found.info_lines += 1
        version = _NCCL_VERSION.search(raw)
        if version and found.nccl_version is None:
            found.nccl_version = version.group(1)
        channel = _CHANNEL.match(line)
        if channel:
            path = channel.group(1).rstrip(",")
            found.paths[path] = found.paths.get(path, 0) + 1
            if path.startswith("NET/") and "GDRDMA" in path:
                found.gdr = True
            continue
        if line.startswith(("Channel ", "Ring ")) and re.search(r"\bvia\b", line):
            found.unplaced += 1
            continue
        using = _NETWORK.match(line)
        if using:
            if using.group(1) not in found.networks:
                found.networks.append(using.group(1))
            continue
        listed = _NET_USING.match(line)
        if listed:
            devices = _devices(listed.group(2))
            if devices:
                found.net_devices.setdefault(listed.group(1), {}).update(devices)
        external = _PLUGIN_EXTERNAL.match(line)
        if external:  # an external library named wins over "not found" lines printed before it
            found.plugin_library = next(g for g in external.groups() if g)
        elif _PLUGIN_INTERNAL.match(line) and found.plugin_library is None:
            found.plugin_library = "internal"
        absent = _NET_ABSENT.match(line)
        if absent and absent.group(1) not in found.net_absent:
            found.net_absent.append(absent.group(1))
        # Only the IB transport's GDR line matters; the socket plugin always says "Disabled".
        if "NET/IB" in line and "GPU Direct RDMA Enabled" in line:
            found.gdr = True
        elif "NET/IB" in line and "GPU Direct RDMA Disabled" in line and found.gdr is None:
            found.gdr = False
        if re.search(r"NCCL_NVLS_ENABLE set by environment to 0", line) or re.search(
            r"NVLS multicast support is not available", line
        ):
            found.nvls = False
        elif re.search(r"NVLS comm 0x|nvlsSupport 1|NVLS multicast support is available", line) and found.nvls is None:
            found.nvls = True
    return found
