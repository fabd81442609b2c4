"""The kernel log's fault classes that are not Xid codes, and the repeat rule: one row per class (what the
driver prints, the action class, the source), read by the facts (verify.facts.kernel_log.driver_faults,
verify.facts.aer), the checks (health_xid, health_aer) and the scheduler hook alike. A new class is a row.

Driver failures (the NVIDIA driver's own "NVRM: " records with no Xid code). Each pattern is matched on the
message after "NVRM: "; a `bus` group names the GPU where the driver prints one ("GPU 0000:98:00.0: ...",
NV_DEV_PRINTF's form, or "GPU at PCI:0000:9b:00"), else the line is the node's ("GPU6 ..." is the driver's own
instance number, not an NVML index). A node-level line in the same burst as a bus-named line of the same
family belongs to that GPU (the GSP boot failure printed just before its "RmInitAdapter failed!").
The strings are those of real published logs (tests/fixtures/node/health/public/README.md, "Round 5").

PCIe AER classes (the kernel's drivers/pci/pcie/aer.c and Documentation/PCI/pcieaer-howto.rst): an
uncorrectable error, fatal or not, leaves the device or its link in an unknown state ("fatal errors ... the
link is unreliable"; a driver without error callbacks "can't recover") and jobs on it fail: FAIL, drain and
reboot (the reset that retrains the link), reseat or RMA if it recurs. Corrected errors are judged as a rate.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from verify.judging.thresholds import Threshold
from verify.judging.verdicts import REBOOT, RESET_GPU, WATCH

_BDF = r"(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"


@dataclass(frozen=True)
class FaultClass:
    key: str  # the name results and docs use
    what: str  # the words a report prints
    match: re.Pattern  # on the driver's message after "NVRM: " (driver classes)
    action: str  # verify.judging.verdicts action class
    source: str
    family: str  # lines of one failure: a node-level line joins a bus-named line of its family in one burst
    reset_class: bool  # a fault a GPU reset clears: its repeats escalate (REPEAT below)


DRIVER_FAULTS = (
    FaultClass(
        "init-failed", "the driver failed to initialise the GPU (RmInitAdapter failed)",
        re.compile(rf"^(?:GPU {_BDF}: )?(?:RmInitAdapter failed!|rm_init_adapter failed)"), REBOOT,
        "NVIDIA Xid catalog, Xid 143 GPU_INIT_ERROR (bucket RESET_GPU); a GPU the driver did not initialise is "
        "missing from nvidia-smi and NVML, so it cannot be reset from there: drain and reboot (the reset at "
        "boot), RMA if it recurs. Lines: NVIDIA/open-gpu-kernel-modules#789, #1230; NVIDIA/gpu-operator#1146",
        "init", False),
    FaultClass(
        "gsp-boot-failed", "the GPU's GSP firmware did not boot (the GPU never initialised)",
        re.compile(r"^(?:GPU\d{1,3} )?(?:RmInitAdapter: Cannot initialize GSP firmware RM|"
                   r"_kgspBootGspRm: .{0,200}(?:cannot proceed|bad state|needs? to be reset)|"
                   r"kgspWaitForGfwBootOk_\w{1,40}: failed to wait for GFW boot complete|"
                   r"gpuWaitForGfwBootComplete_\w{1,40}: failed to wait for GFW_BOOT)"), REBOOT,
        "the driver's own words: \"the GPU is likely in a bad state and may need to be reset\" "
        "(_kgspBootGspRm); NVIDIA Xid catalog Xid 143 GPU_INIT_ERROR. Lines: "
        "NVIDIA/open-gpu-kernel-modules#1230, #789", "init", False),
    FaultClass(
        "reset-required", "the driver reports the GPU needs a reset (NV_ERR_RESET_REQUIRED)",
        re.compile(r"\[NV_ERR_RESET_REQUIRED\]"), RESET_GPU,
        "NV_ERR_RESET_REQUIRED (0x62, \"Reset required\", src/common/sdk/nvidia/inc/nvstatuscodes.h); NVIDIA Xid "
        "catalog Xid 154 \"GPU Reset Required\" (RESET_GPU). Lines: scitix/sichek#51, "
        "NVIDIA/open-gpu-kernel-modules#1045", "reset", True),
    FaultClass(
        "gsp-timeout", "the GPU's GSP stopped answering (GSP RPC timeout)",
        re.compile(rf"Timeout after \d{{1,5}}s of waiting for RPC response from GPU\d{{1,3}} GSP|"
                   rf"\*{{3,}} GSP Timeout \*{{3,}}|"
                   rf"Rate limiting GSP RPC error prints for GPU at PCI:{_BDF}"), RESET_GPU,
        "NVIDIA Xid catalog, Xid 119 GSP_RPC_TIMEOUT (RESET_GPU); the driver's own \"The GPU likely needs to be "
        "reset\". Lines: leptonai/gpud dmesg-with-xid-119.log, NVIDIA/open-gpu-kernel-modules#446", "gsp", True),
)

# The repeat rule (issue 46 item 5), NVIDIA NVSentinel's RepeatedXidError defaults (health-events-analyzer,
# XidBurstDetector, DefaultXidBurstDetectorConfig): lines of one fault less than 180 s apart are one burst (one
# failure printed many times is one incident); the same reset-class fault in 5 or more bursts within 24 hours
# is a repeat even with no reset in between: FAIL, drain and reboot (the reset it needs, and it kills jobs
# meanwhile). NVSentinel also keeps "sticky" Xids (74, 79, 95, 109, 119) in one burst for 3 hours; tunefleet
# does not: a GSP that times out again after minutes of quiet has failed again, not printed once more.
BURST_GAP_S = 180.0
REPEAT_BURSTS = 5
REPEAT_WINDOW_S = 24 * 3600.0
REPEAT_ACTION = REBOOT
REPEAT_SOURCE = ("NVIDIA NVSentinel RepeatedXidError defaults: bursts split by gaps over 180 s, 5 bursts of one "
                 "fault within 24 h")

# PCIe AER. Uncorrectable errors (fatal or non-fatal) on a GPU or NIC, or on a port on its path: FAIL, reboot.
AER_UNCORRECTABLE_ACTION = REBOOT
AER_SOURCE = ("Linux Documentation/PCI/pcieaer-howto.rst (uncorrectable errors: the link or the transaction is "
              "unreliable; \"can't recover\": no error callbacks, the device stays failed), drivers/pci/pcie/aer.c")
# A surprise link down (SDES) or a completion timeout on a GPU's path is the GPU lost from the bus (Xid 79's
# cause); reseat and RMA if it stays.
AER_LOST_ERRORS = ("SDES", "Surprise Down Error", "CmpltTO", "Completion Timeout")
AER_LOST_ACTION = REBOOT
# Corrected errors: DCGM's PCIe health watch warns above 8 replays a minute ("8 replays per minute is the
# maximum recommended by RM", DCGM dcgm_gpu_hardware_limits.h DCGM_LIMIT_MAX_PCIREPLAY_RATE; a replay is the link
# layer's answer to the BadTLP / BadDLLP / Timeout errors AER counts as corrected). One corrected error is
# not a fault; a storm above that rate is a WARN (watch: reseat when it persists). Never a FAIL: corrected.
AER_CORRECTED_PER_MIN = Threshold(limit=8.0, kind="max", source=(
    "DCGM DCGM_LIMIT_MAX_PCIREPLAY_RATE: 8 PCIe replays per minute, the most RM recommends (health watch WARN)"))
AER_STORM_ACTION = WATCH
AER_LOST_WORDS = "reseat the card or riser at {what} and check the slot; RMA if it recurs"


_NAMED_GPU = re.compile(rf"^(?:GPU |GPU at PCI:){_BDF}")


def driver_fault(message: str) -> Optional[tuple]:
    """(FaultClass, bus or None) for a driver message (after "NVRM: ") of a class above, else None. An Xid
    line is the Xid catalog's, never one of these."""
    if message.startswith("Xid "):
        return None
    for fault in DRIVER_FAULTS:
        match = fault.match.search(message)
        if match:
            bus = match.groupdict().get("bus")
            if bus is None:  # the driver's NV_DEV_PRINTF prefix names the GPU on other lines of the class
                named = _NAMED_GPU.match(message)
                bus = named.group("bus") if named else None
            return fault, bus
    return None


def bursts(times: list) -> list:
    """Seconds (None: undated) -> the bursts: lists of indices whose neighbours are at most BURST_GAP_S apart,
    in time order. Undated lines cannot be told apart: they join one burst (never more incidents than proven)."""
    dated = sorted((t, i) for i, t in enumerate(times) if t is not None)
    undated = [i for i, t in enumerate(times) if t is None]
    found: list = []
    last = None
    for when, index in dated:
        if last is None or when - last > BURST_GAP_S:
            found.append([])
        found[-1].append(index)
        last = when
    if undated:
        if found:
            found[0].extend(undated)
        else:
            found.append(undated)
    return found


def repeats(times: list) -> int:
    """The most bursts of one fault that start within any REPEAT_WINDOW_S (0 for none; undated lines: 1)."""
    found = bursts(times)
    starts = sorted(min(times[i] for i in burst if times[i] is not None) for burst in found
                    if any(times[i] is not None for i in burst))
    if not starts:
        return len(found)
    return max(sum(1 for other in starts[i:] if other - start <= REPEAT_WINDOW_S) for i, start in enumerate(starts))


def repeated(times: list) -> bool:
    return repeats(times) >= REPEAT_BURSTS
