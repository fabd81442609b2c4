"""Why a benchmark figure is slow, and what to do: the most likely cause the node itself shows, and the
action class, for every benchmark FAIL, WARN and ERROR of a run (issue 40 item 4).

A figure alone says "slow"; an operator acts on "slow because ...". The causes, checked in this order,
each with its evidence in `details["cause"]` and named in the message ("because ..."):
- another process computes on the GPU (nvidia-smi --query-compute-apps, read again after the engine ran):
  someone's job, not broken hardware: ERROR, action `application` (a busy GPU is never a hardware FAIL);
- an NCCL setting that takes a transport or bandwidth away (verify.facts.nccl_settings, agreeing with the
  transport NCCL reported): `fix-config`, naming the line;
- a hardware slowdown NVML reported while the figure was measured (HW slowdown, thermal, power brake):
  `drain-rma` (cooling, power supply: NVIDIA's clocks event reasons say the hardware forced it);
- the GPU's PCIe link below its maximum under load (bench.pcie_link): `drain-rma` (reseat, then RMA);
- the CPU governor the desired state asks for is not what the CPUs run (cpu.governor): `fix-config`.
A figure with none of these keeps its own action, else the family's default (DEFAULT_ACTIONS): a slow GPU
or link with no configuration to blame is drained and rebooted first (RMA if it recurs), a broken
measurement (ERROR) is watched (re-run). Pure over the rows, except the one re-read of GPU processes.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.bench import gpu_clocks
from verify.facts import nccl_settings
from verify.facts.gpu_processes import normal_bus, read_gpu_processes
from verify.facts.gpu_query import query_gpus
from verify.judging import verdicts
from verify.result import CheckResult, Status

# check id prefix -> (action, what the action is about) when the node shows no cause.
DEFAULT_ACTIONS = (
    ("bench.gpu_hbm.", verdicts.REBOOT, "the GPU"),
    ("bench.gpu_matmul.", verdicts.REBOOT, "the GPU"),
    ("bench.gpu_copy", verdicts.REBOOT, "the GPUs' NVLinks"),
    ("bench.nccl_allreduce", verdicts.REBOOT, "the GPUs' links"),
    ("bench.h2d.", verdicts.DRAIN_RMA, "the GPU's PCIe slot or riser"),
    ("bench.d2h.", verdicts.DRAIN_RMA, "the GPU's PCIe slot or riser"),
    ("bench.pcie_link.", verdicts.DRAIN_RMA, "the GPU's PCIe slot or riser"),
    ("bench.rdma", verdicts.DRAIN_RMA, "the HCA, its cable or transceiver"),
    ("bench.storage", verdicts.DRAIN_RMA, "the storage device"),
    ("bench.gpu_burn", verdicts.DRAIN_RMA, "the GPU"),
    ("bench.dcgm", verdicts.DRAIN_RMA, "the GPU"),
)
# A family's summary row and the prefixes of its rows: the summary carries the worst action among them.
SUMMARY_OF = {"bench.gpu": ("bench.gpu_", "bench.gpu.gpu"),
              "bench.hostcopy": ("bench.h2d.", "bench.d2h.", "bench.pcie_link.", "bench.hostcopy.")}
_GPU_IN_ID = re.compile(r"\.gpu(\d+)(?:_to_gpu(\d+))?$")
_HOT_REASONS = {"hw_thermal_slowdown", "sw_thermal_slowdown"}


def gpus_of(row: CheckResult) -> list:
    """The NVML indices a benchmark row is about, from its id (bench.gpu_copy.gpu0_to_gpu1 -> [0, 1])."""
    match = _GPU_IN_ID.search(row.check_id)
    if match:
        return [int(g) for g in match.groups() if g is not None]
    listed = row.details.get("gpus") if isinstance(row.details, dict) else None
    return [g for g in listed if isinstance(g, int)] if isinstance(listed, list) else []


def _set(row: CheckResult, what: str, evidence: str, action: str, about: str, status: Optional[Status] = None,
         **cause) -> None:
    # cause: its class (and where an NCCL line is), which verify.judging.remedies maps to the remedy
    row.details["cause"] = {"what": what, "evidence": evidence, **cause}
    row.details[verdicts.ACTION_KEY] = action
    if status is not None:
        row.status = status
    row.reason = f"{row.reason} because {what} ({evidence})"
    row.remediation = verdicts.remedy(action, ",".join(str(g) for g in gpus_of(row)) or "N", about)


def _slowdowns(row: CheckResult) -> list:
    windows = row.details.get("nvml") if isinstance(row.details.get("nvml"), dict) else {}
    seen = []
    for window in windows.values():
        for name in gpu_clocks.slowdowns(window, gpu_clocks.SLOWDOWN) if isinstance(window, dict) else []:
            if name not in seen:
                seen.append(name)
    return seen


def explain(results: list, node, environment: Optional[dict] = None) -> None:
    """Cause and action on every benchmark row that is not PASS or SKIP (in place)."""
    rows = [r for r in results if r.role == "bench" and r.status in (Status.FAIL, Status.WARN, Status.ERROR)]
    if not rows:
        return
    by_id = {r.check_id: r for r in results}
    processes = None
    settings = None
    governor = by_id.get("cpu.governor")
    summaries = [r for r in rows if r.check_id in SUMMARY_OF]
    for row in rows:
        if not isinstance(row.details, dict):
            row.details = {}
        if row.check_id in SUMMARY_OF:
            continue  # after its family's rows: it carries the worst of their actions
        if "cause" in row.details:  # set where it was judged (a busy GPU left out, the engine's OOM)
            continue
        gpus = gpus_of(row)
        if gpus and row.status is not Status.ERROR:
            if processes is None:  # read once, only when a GPU figure needs explaining
                inventory = {g.index: g.bus_id for g in _inventory(node)}
                found = read_gpu_processes(node)
                processes = {index: found.by_bus.get(normal_bus(bus), []) for index, bus in inventory.items()}
            held = [(g, p) for g in gpus for p in processes.get(g, [])]
            if held:
                said = "; ".join(f"GPU {g}: {p.describe()}" for g, p in held[:3])
                _set(row, "another process computes on the GPU", said, verdicts.APPLICATION, "the GPU", Status.ERROR,
                     **{"class": "gpu-busy"})
                continue
        if row.check_id.startswith("bench.nccl_allreduce") and row.status is not Status.ERROR:
            if settings is None:
                settings = nccl_settings.effective(node, environment)
            transport = row.details.get("transport") if isinstance(row.details.get("transport"), dict) else {}
            kinds = [k for k in transport.get("kinds") or [] if isinstance(k, str)]
            limits = nccl_settings.limiting(settings, kinds)
            if limits:
                said = "; ".join(f"{s.describe()} {what}" for s, what in limits)
                used = f"; NCCL used {', '.join(kinds)}" if kinds else ""
                _set(row, limits[0][0].describe(), said + used,
                     verdicts.FIX_CONFIG, "the NCCL settings (gpu_nccl_conf, the job's environment)",
                     Status.FAIL if row.status is Status.WARN else None,
                     **{"class": "nccl-setting", "key": limits[0][0].key, "origin": limits[0][0].origin})
                continue
        slow = _slowdowns(row)
        if slow and row.status is not Status.ERROR:
            _set(row, f"{', '.join(slow)} was active while it ran", "NVML clocks event reasons sampled during the "
                 "measurement", verdicts.DRAIN_RMA, "the GPU's cooling or power supply" if _HOT_REASONS & set(slow)
                 else "the GPU's power delivery", **{"class": "slowdown"})
            continue
        link = next((by_id.get(f"bench.pcie_link.gpu{g}") for g in gpus
                     if by_id.get(f"bench.pcie_link.gpu{g}") is not None
                     and by_id[f"bench.pcie_link.gpu{g}"].status is Status.FAIL), None)
        if link is not None and row.check_id.startswith(("bench.h2d.", "bench.d2h.")):
            _set(row, "its PCIe link runs below its maximum under load", link.reason, verdicts.DRAIN_RMA,
                 "the GPU's PCIe slot or riser", **{"class": "pcie-link"})
            continue
        if governor is not None and governor.status in (Status.FAIL, Status.WARN) and row.status is not Status.ERROR \
                and row.check_id.startswith(("bench.h2d.", "bench.d2h.", "bench.nccl_allreduce", "bench.storage",
                                             "bench.rdma")):
            _set(row, "the CPU frequency governor is not the one the desired state asks for", governor.reason,
                 verdicts.FIX_CONFIG, "cpu_governor", **{"class": "cpu-governor"})
            continue
        if verdicts.action_of(row.details) is None:
            default(row)
    for summary in summaries:
        members = [r for r in results if r.check_id.startswith(SUMMARY_OF[summary.check_id])
                   and r.status is not Status.PASS and verdicts.action_of(r.details)]
        if members:
            summary.details[verdicts.ACTION_KEY] = verdicts.worst(verdicts.action_of(r.details) for r in members)
        elif verdicts.action_of(summary.details) is None:
            default(summary)


def default(row: CheckResult) -> None:
    """The family's action where the node shows no cause: ERROR (a measurement that could not be made or
    cannot be real) is `watch` (re-run it); a WARN is `watch`; a FAIL the family's default."""
    if row.status is not Status.FAIL:
        row.details[verdicts.ACTION_KEY] = verdicts.WATCH
        return
    action, about = next(((a, w) for prefix, a, w in DEFAULT_ACTIONS if row.check_id.startswith(prefix)),
                         (verdicts.REBOOT, "the node"))
    row.details[verdicts.ACTION_KEY] = action
    row.details["cause"] = {"class": "unexplained", "what": "no configuration or process on the node explains it",
                            "evidence": "no other process on the GPU, no limiting NCCL setting, no slowdown reason, "
                                        "PCIe link at its maximum"}
    words = verdicts.remedy(action, ",".join(str(g) for g in gpus_of(row)) or "N", about)
    row.remediation = f"{words}; {row.remediation}" if row.remediation else words


def _inventory(node) -> list:
    try:
        return query_gpus(node).gpus
    except ValueError:
        return []


# Cause classes a judge names outside explain(), by key (details["cause"]["class"]): what it is, the action
# class, what the action is about. A new one is a row here (verify.judging.remedies maps each to its remedy).
CAUSE_CLASSES = {
    # verify.bench.nccl_transport: a cross-node figure that rode NCCL's socket transport where the desired state
    # expects RDMA (gpu_rdma_expected). NCCL falls back to sockets when its IB plugin finds no usable HCA or
    # port ("NET/IB : No device found.", nccl#958), and stages through host memory without GPUDirect RDMA.
    "nccl-socket-not-rdma": (
        "NCCL took its TCP socket transport between nodes where RDMA is expected", verdicts.FIX_CONFIG,
        "the RDMA path: nvidia_peermem loaded or DMA-BUF (gpu_nvidia_peermem), the HCAs NCCL may use "
        "(NCCL_IB_HCA) and on RoCE the GID index (NCCL_IB_GID_INDEX) in gpu_nccl_conf"),
}


def name_cause(row: CheckResult, key: str, evidence: str, status: Optional[Status] = None) -> None:
    """Set the cause class `key` of CAUSE_CLASSES on `row` (in place), with its action and remediation."""
    what, action, about = CAUSE_CLASSES[key]
    _set(row, what, evidence, action, about, status)
    row.details["cause"]["class"] = key
