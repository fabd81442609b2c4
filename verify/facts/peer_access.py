"""Peer access: which GPUs CUDA lets map each other's memory, and what links each pair.

CUDA's answer (`cudaDeviceCanAccessPeer`, through torch) comes from an engine process
(verify.facts.peer_access_engine, run through node.run like every engine: verify.engine), so the
verify process never imports torch. What links a pair comes from `nvidia-smi topo -m`: its GPU-by-GPU
cells say NV# (a bonded set of # NVLinks, through an NVSwitch or a bridge) or the PCIe distance (PIX,
PXB, PHB, NODE, SYS).

Every read is pure where it can be: `parse_peer_result` and `parse_topo_gpu_links` take text;
`read_peer_access` and `read_gpu_links` only run the commands and hand the text over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from verify.engine import CANNOT_RUN, ENGINE_CWD, checked_payload, engine_argv, engine_env, read_result
from verify.facts import peer_access_engine  # its PAYLOAD_SCHEMA; torch is imported only in its main()
from verify.facts.gpu_query import query_gpus
from verify.node import Node

ENGINE = "verify.facts.peer_access_engine"
# torch numbers GPUs fastest-first unless told; nvidia-smi (and so `topo -m` and the checks) by PCI bus.
ENGINE_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
# Importing torch and creating a CUDA context on every GPU: seconds; a hung driver must not hold the run.
ENGINE_TIMEOUT_S = 120.0
TOPO_ARGV = ["nvidia-smi", "topo", "-m"]
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV = re.compile(r"^NV([0-9]{1,4})$")
_GPU = re.compile(r"^GPU([0-9]{1,4})$")


class TopoParseError(ValueError):
    pass


@dataclass
class PeerAccess:
    """CUDA's peer-access answer per ordered pair of nvidia-smi GPU indices.

    `skip_reason`: the node cannot answer (no torch, no CUDA device); `error`: the engine failed
    (hung, crashed, a malformed result). Either leaves `can_access` empty."""

    gpus: dict = field(default_factory=dict)  # nvidia-smi index -> name
    can_access: dict = field(default_factory=dict)  # (src index, dst index) -> bool
    torch_version: str = ""
    mapped_by: str = ""  # "bus id" or "ordinal" (CUDA_DEVICE_ORDER=PCI_BUS_ID)
    skip_reason: str = ""
    error: str = ""
    problems: list = field(default_factory=list)  # malformed rows dropped at the payload check
    raw: dict = field(default_factory=dict)  # the engine's exit status and output tails, for the report

    @property
    def refused(self) -> list:
        return sorted(pair for pair, can in self.can_access.items() if not can)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _tail(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def normal_bus_id(text: str) -> str:
    """'0000:18:00.0', '18:00.0' -> '00000000:18:00.0' (nvidia-smi's 8-digit domain, upper case)."""
    parts = text.strip().upper().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    return ":".join([parts[0].zfill(8), *parts[1:]])


def parse_peer_result(stdout: str, bus_to_index: Optional[dict] = None) -> PeerAccess:
    """The engine's marked line -> PeerAccess keyed by nvidia-smi index (by bus id where both sides know
    it, else CUDA's ordinal, which CUDA_DEVICE_ORDER=PCI_BUS_ID makes the same). `error` says what is
    missing or malformed; a malformed pair row is dropped and named in `problems`."""
    payload, problems = checked_payload(read_result(stdout), peer_access_engine.PAYLOAD_SCHEMA)
    if payload is None:
        return PeerAccess(error="the peer access engine returned a malformed result: " + "; ".join(problems[:3]),
                          problems=problems)
    known = {normal_bus_id(bus): index for bus, index in (bus_to_index or {}).items()}
    index_of, mapped = {}, "bus id"
    for gpu in payload["gpus"]:
        bus = gpu.get("bus_id")
        if bus and normal_bus_id(bus) in known:
            index_of[gpu["ordinal"]] = known[normal_bus_id(bus)]
        else:
            index_of[gpu["ordinal"]], mapped = gpu["ordinal"], "ordinal"
    found = PeerAccess(gpus={index_of[g["ordinal"]]: g["name"] for g in payload["gpus"]},
                       torch_version=payload["torch"], mapped_by=mapped, problems=problems)
    for pair in payload["pairs"]:
        if pair["src"] in index_of and pair["dst"] in index_of:
            found.can_access[(index_of[pair["src"]], index_of[pair["dst"]])] = pair["can_access"]
        else:
            found.problems.append(f"pair {pair['src']}->{pair['dst']}: a CUDA ordinal the engine did not list")
    return found


def read_peer_access(node: Node) -> PeerAccess:
    """Run the engine on the node; SKIP reasons and errors are said, never raised."""
    argv = engine_argv(ENGINE, [])
    out = node.run(argv, timeout_s=ENGINE_TIMEOUT_S, env=engine_env(ENGINE_ENV), cwd=ENGINE_CWD)
    raw = {"returncode": out.returncode, "stderr_tail": _tail(out.stderr or ""), "stdout_tail": _tail(out.stdout or "")}
    if out.timed_out:
        return PeerAccess(error=f"the peer access engine hung: killed after {ENGINE_TIMEOUT_S:.0f} s", raw=raw)
    if out.missing:
        return PeerAccess(error=f"the peer access engine could not start: {_last_line(out.stderr)}", raw=raw)
    if read_result(out.stdout) is None:
        if out.returncode == CANNOT_RUN:
            return PeerAccess(skip_reason=_last_line(out.stderr), raw=raw)
        return PeerAccess(error=f"the peer access engine exited {out.returncode} without a result: "
                                f"{_last_line(out.stderr)}", raw=raw)
    inventory = query_gpus(node)
    found = parse_peer_result(out.stdout, {g.bus_id: g.index for g in inventory.gpus})
    found.raw = raw
    return found


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
    lines = text.replace("\x1b[4m", "").replace("\x1b[0m", "").splitlines()
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^[ \t]+GPU0\b", line)), None)
    if header_at is None:
        raise TopoParseError(f"no header line with GPU0 in {text.strip()[:80]!r}")
    columns = []
    for word in lines[header_at].split():
        if not _GPU.match(word):
            break
        columns.append(int(word[3:]))
    links: dict = {}
    for number, line in enumerate(lines[header_at + 1:], header_at + 2):
        words = line.split()
        if words and words[0] == "Legend:":
            break
        if not words or not _GPU.match(words[0]):
            continue
        row = int(words[0][3:])
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
