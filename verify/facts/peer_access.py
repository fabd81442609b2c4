"""Peer access: which GPUs the driver lets map each other's memory, and what links each pair.

The answer comes from NVML's P2P status per ordered pair and capability (nvmlDeviceGetP2PStatus, READ and
WRITE), never from a CUDA context: the scheduler's hooks run beside users' jobs, where a context takes memory
from the job and cannot be created at all on a GPU in EXCLUSIVE_PROCESS mode (DCGM's health watches and gpud
read NVML alone for the same reason). Two readers give the same answer:

- the scheduler's in-process NVML session (verify.scheduler.nvml.read_raw asks every pair, nvml_facts.prime hands the
  PeerAccess to node.memo[MEMO_P2P]);
- elsewhere (`verify --local`, drills, captured output) `nvidia-smi topo -p2p r` and `-p2p w` through
  node.run: a GPU-by-GPU matrix of X / OK / CNS / GNS / TNS / NS / DR / U with a Legend.

CUDA's own answer (cudaDeviceCanAccessPeer) belongs to `verify`'s benchmark phase, whose engine may hand it
over as a PeerAccess with source SOURCE_CUDA. What links a pair comes from `nvidia-smi topo -m`: its
GPU-by-GPU cells say NV# (a bonded set of # NVLinks, through an NVSwitch or a bridge) or the PCIe distance
(PIX, PXB, PHB, NODE, SYS).

Every read is pure where it can be: `parse_p2p_matrix` and `parse_topo_gpu_links` take text;
`read_peer_access` and `read_gpu_links` only run the commands and hand the text over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verify.facts.gpu_query import query_gpus
from verify.node import Node

SOURCE_NVML = "nvml"
SOURCE_SMI = "nvidia-smi topo -p2p"
SOURCE_CUDA = "cuda"
MEMO_P2P = "peer_access"  # node.memo key: the PeerAccess the scheduler's NVML session read
# nvmlGpuP2PCapsIndex_t (nvml.h) by its integer: pynvml spells NVML_P2P_CAPS_INDEX_READ as the tuple (0,)
# (a stray comma), which ctypes refuses ("Don't know how to convert parameter 3").
P2P_CAPS = (("read", 0, "r"), ("write", 1, "w"))  # (name, NVML capability index, nvidia-smi -p2p letter)
# nvmlGpuP2PStatus_t (nvml.h)
STATUS_OK = 0
STATUS_NAMES = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED", 3: "IOH_TOPOLOGY_NOT_SUPPORTED",
                4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED", 6: "UNKNOWN"}
# nvidia-smi topo -p2p's cells, as its Legend names them, -> the same status
SMI_CELLS = {"OK": 0, "CNS": 1, "GNS": 2, "TNS": 3, "DR": 4, "NS": 5, "U": 6}
SMI_TIMEOUT_S = 20.0
TOPO_ARGV = ["nvidia-smi", "topo", "-m"]
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV = re.compile(r"^NV([0-9]{1,4})$")
_GPU = re.compile(r"^GPU([0-9]{1,4})$")


class TopoParseError(ValueError):
    pass


class P2pParseError(ValueError):
    pass


@dataclass
class PeerAccess:
    """The driver's peer-access answer per ordered pair of nvidia-smi GPU indices, and where it came from.

    `source`: SOURCE_NVML, SOURCE_SMI or SOURCE_CUDA. `status`: per pair, the P2P status per capability
    (nvml.h's names: "OK", "GPU_NOT_SUPPORTED", ...), where NVML or nvidia-smi answered; `can_access` is
    True where every capability read OK. `skip_reason`: the node cannot answer (no nvidia-smi); `error`:
    the answer could not be read (a command failed, output that does not parse). Either leaves
    `can_access` empty."""

    gpus: dict = field(default_factory=dict)  # nvidia-smi index -> name
    can_access: dict = field(default_factory=dict)  # (src index, dst index) -> bool
    source: str = ""
    status: dict = field(default_factory=dict)  # (src index, dst index) -> {"read": "OK", "write": "OK"}
    torch_version: str = ""  # SOURCE_CUDA only
    mapped_by: str = ""  # SOURCE_CUDA only: "bus id" or "ordinal"
    skip_reason: str = ""
    error: str = ""
    problems: list = field(default_factory=list)
    raw: dict = field(default_factory=dict)  # the commands' exit status and output tails, for the report

    @property
    def refused(self) -> list:
        return sorted(pair for pair, can in self.can_access.items() if not can)


def status_name(code: int) -> str:
    return STATUS_NAMES.get(code, f"status {code}")


def from_status(gpus: dict, by_capability: dict, source: str) -> PeerAccess:
    """{capability name: {(a, b): nvmlGpuP2PStatus_t}} -> PeerAccess: a pair can access its peer when
    every capability asked is OK. A pair one capability lacks is refused and named in `problems`."""
    found = PeerAccess(gpus=dict(gpus), source=source)
    pairs = sorted({pair for statuses in by_capability.values() for pair in statuses})
    for pair in pairs:
        named = {}
        for capability, statuses in by_capability.items():
            if pair in statuses:
                named[capability] = status_name(statuses[pair])
            else:
                found.problems.append(f"{pair[0]}->{pair[1]}: no {capability} status")
        found.status[pair] = named
        found.can_access[pair] = len(named) == len(by_capability) and all(s == "OK" for s in named.values())
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _tail(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


_SGR = re.compile(r"\x1b\[[0-9;]{0,16}m")


def plain(text: str) -> str:
    """nvidia-smi's topology tables without their terminal escapes: it underlines the header row
    (ESC[4m ... ESC[0m) even into a pipe (the 4x H200 capture of `topo -p2p r`, `topo -m` on the 2x H200)."""
    return _SGR.sub("", text)


def gpu_rows(lines: list, header_at: int):
    """(line number, GPU index, the line's words) of each `GPU<n>` row under a topology table's header, up to
    its Legend: the row walk both `nvidia-smi topo` tables share."""
    for number, line in enumerate(lines[header_at + 1:], header_at + 2):
        words = line.split()
        if words and words[0] == "Legend:":
            return
        if words and _GPU.match(words[0]):
            yield number, int(words[0][3:]), words


def parse_p2p_matrix(text: str) -> dict:
    """`nvidia-smi topo -p2p r|w|n` -> {(gpu, gpu): nvmlGpuP2PStatus_t} for every ordered pair. Raises
    P2pParseError naming the line for a cell that is none of the Legend's."""
    lines = plain(text).splitlines()
    header_at = next((i for i, line in enumerate(lines)
                      if line.split() and all(_GPU.match(word) for word in line.split())), None)
    if header_at is None:
        raise P2pParseError(f"no header line of GPU columns in {text.strip()[:80]!r}")
    columns = [int(word[3:]) for word in lines[header_at].split()]
    statuses: dict = {}
    for number, row, words in gpu_rows(lines, header_at):
        cells = words[1:]
        if len(cells) != len(columns):
            raise P2pParseError(f"line {number}: GPU{row} has {len(cells)} cells for {len(columns)} GPUs")
        for column, cell in zip(columns, cells):
            if column == row:
                if cell != "X":
                    raise P2pParseError(f"line {number}: GPU{row}'s own cell is {cell[:20]!r}, not X")
                continue
            if cell not in SMI_CELLS:
                raise P2pParseError(f"line {number} (GPU{row}, GPU{column}): {cell[:20]!r} is not a P2P status "
                                    f"({', '.join(SMI_CELLS)})")
            statuses[(row, column)] = SMI_CELLS[cell]
    if len(columns) > 1 and not statuses:
        raise P2pParseError("no GPU row under the header")
    return statuses


def _gpu_names(node: Node) -> dict:
    try:
        return {g.index: g.name for g in query_gpus(node).gpus}
    except ValueError:
        return {}


def read_smi_p2p(node: Node) -> PeerAccess:
    """`nvidia-smi topo -p2p r` and `-p2p w` on the node -> PeerAccess; reasons and errors said, never raised."""
    by_capability, raw = {}, {}
    for capability, _, letter in P2P_CAPS:
        argv = ["nvidia-smi", "topo", "-p2p", letter]
        out = node.run(argv, timeout_s=SMI_TIMEOUT_S)
        raw[capability] = {"returncode": out.returncode, "stdout_tail": _tail(out.stdout or ""),
                           "stderr_tail": _tail(out.stderr or "")}
        if out.missing:
            return PeerAccess(source=SOURCE_SMI, skip_reason="nvidia-smi is not installed", raw=raw)
        if not out.ok:
            why = "timed out" if out.timed_out else f"exited {out.returncode}"
            return PeerAccess(source=SOURCE_SMI, raw=raw, error=f"{' '.join(argv)} {why}: "
                                                                 f"{_last_line(out.stderr or out.stdout)[:160]}")
        try:
            by_capability[capability] = parse_p2p_matrix(out.stdout)
        except P2pParseError as exc:
            return PeerAccess(source=SOURCE_SMI, raw=raw, error=f"{' '.join(argv)}: {exc}")
    gpus = sorted({index for statuses in by_capability.values() for pair in statuses for index in pair})
    names = _gpu_names(node)
    found = from_status({index: names.get(index, "") for index in gpus}, by_capability, SOURCE_SMI)
    if found.problems:
        found.error = "nvidia-smi topo -p2p r and w list different GPU pairs: " + "; ".join(found.problems[:3])
        found.raw = raw
    return found


def read_peer_access(node: Node) -> PeerAccess:
    """The scheduler's NVML reading where one was primed (node.memo[MEMO_P2P]), else nvidia-smi's. Never
    a CUDA context."""
    primed = node.memo.get(MEMO_P2P)
    if isinstance(primed, PeerAccess):
        return primed
    return read_smi_p2p(node)
def _cell(text: str, where: str) -> str:
    cell = text.strip().upper()
    if cell == "SOC":  # what drivers before R384 printed for SYS
        return "SYS"
    if cell == "X" or cell in PCIE_LEVELS or _NV.match(cell):
        return cell
    raise TopoParseError(f"{where}: {text.strip()[:20]!r} is not a topology level (X, NV#, {', '.join(PCIE_LEVELS)})")


def parse_topo_gpu_links(text: str) -> dict:
    """`nvidia-smi topo -m` -> {(gpu, gpu): "NV18" | "PIX" | ... | "SYS"} for every ordered pair of GPUs (the
    GPU columns come first in its header). Raises TopoParseError naming the line."""
    lines = plain(text).splitlines()
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^[ \t]+GPU0\b", line)), None)
    if header_at is None:
        raise TopoParseError(f"no header line with GPU0 in {text.strip()[:80]!r}")
    columns = []
    for word in lines[header_at].split():
        if not _GPU.match(word):
            break
        columns.append(int(word[3:]))
    links: dict = {}
    for number, row, words in gpu_rows(lines, header_at):
        cells = words[1:1 + len(columns)]
        if len(cells) < len(columns):
            raise TopoParseError(f"line {number}: GPU{row} has {len(cells)} cells for {len(columns)} GPUs")
        for column, cell in zip(columns, cells):
            if column != row:
                links[(row, column)] = _cell(cell, f"line {number} (GPU{row}, GPU{column})")
    if not links and len(columns) > 1:
        raise TopoParseError("no GPU row under the header")
    return links


def nvlink_count(level: str) -> int:
    """NVLinks a topo cell says join the pair: 'NV18' -> 18, a PCIe level -> 0."""
    match = _NV.match(level or "")
    return int(match.group(1)) if match else 0


def read_gpu_links(node: Node) -> tuple:
    """({(gpu, gpu): level}, why not) from `nvidia-smi topo -m` on the node."""
    out = node.run(TOPO_ARGV, timeout_s=20.0)
    if out.missing:
        return {}, "nvidia-smi is not installed"
    if not out.ok:
        return {}, f"nvidia-smi topo -m failed: {_last_line(out.stderr or out.stdout)[:160]}"
    try:
        return parse_topo_gpu_links(out.stdout), ""
    except TopoParseError as exc:
        return {}, f"nvidia-smi topo -m: {exc}"
