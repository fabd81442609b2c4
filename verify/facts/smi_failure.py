"""nvidia-smi's own failure forms: what it prints, and exits with, when it cannot read a GPU, and the verdict each
form means. One table (FORMS for the messages, EXIT_CODES for the exit status); the readers (verify.facts.health_smi,
gpu_query, fabric) classify every nvidia-smi output through it, so a lost GPU reads as lost, never as "not installed".

Sources: the exit codes are nvidia-smi(1), "RETURN VALUE" (the same numbers as NVML's nvmlReturn_t, nvml.h); the
messages are nvidia-smi's own text as published in bug reports (tests/fixtures/node/health/public/README.md names
each one). "GPU is lost" / "requires a reset" are NVML_ERROR_GPU_IS_LOST ("The GPU has fallen off the bus or has
otherwise become inaccessible") and NVML_ERROR_RESET_REQUIRED ("The GPU requires a reset before it can be used
again"): both leave the GPU unusable until reset or reboot, so both are a FAIL of class reboot (drain, then reset
or reboot; RMA if it recurs). An action of None means the output says nothing about the node's GPUs (a wrong
flag, no permission): tunefleet could not check, which is ERROR, never PASS.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from verify.judging import verdicts

_BUS = r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"


@dataclass(frozen=True)
class Form:
    name: str
    pattern: re.Pattern
    action: Optional[str]  # verdicts class; None: not a finding about the GPUs (could not check)
    words: str  # what it means, for the reason
    needs_gpus_on_bus: bool = False  # a fault only where the PCI bus shows NVIDIA GPUs (else: no GPU, SKIP)


FORMS = (
    # "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error" (open-gpu-kernel-modules#387,
    # reseated to fix), "...for GPU0000:3B:00.0: GPU is lost. Reboot the system to recover this GPU"
    Form("device-handle", re.compile(r"Unable to (?:determine|detect) the device handle for GPU\s*" + _BUS
                                     + r"\s*:\s*(?P<error>[^\r\n]*)", re.I),
         verdicts.REBOOT, "the driver cannot reach the GPU (NVML has no handle for it)"),
    Form("driver-unreachable", re.compile(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                          r"driver", re.I),
         verdicts.REBOOT, "the NVIDIA driver does not answer", needs_gpus_on_bus=True),
    Form("no-devices", re.compile(r"^\s*No devices were found\s*$", re.M | re.I),
         verdicts.REBOOT, "the driver initialised none of the GPUs on the PCI bus", needs_gpus_on_bus=True),
    Form("version-mismatch", re.compile(r"Failed to initialize NVML: Driver/library version mismatch", re.I),
         verdicts.REBOOT, "the loaded driver is older than its user-space library (upgraded without a reboot)"),
    Form("nvml-init", re.compile(r"Failed to initialize NVML: (?!Driver/library)(?P<error>[^\r\n]*)", re.I),
         verdicts.REBOOT, "NVML could not initialise", needs_gpus_on_bus=True),
    Form("inforom", re.compile(r"infoROM is corrupted at gpu\s*" + _BUS, re.I),
         verdicts.DRAIN_RMA, "the GPU's infoROM is corrupted"),
    Form("permission", re.compile(r"Insufficient Permissions", re.I), None, "nvidia-smi lacks the permission"),
)

# nvidia-smi(1) RETURN VALUE: code -> (meaning, action class or None: could not check).
EXIT_CODES = {
    2: ("a supplied argument or flag is invalid", None),
    3: ("the requested operation is not available on target device", None),
    4: ("the current user does not have permission to access this device or perform this operation", None),
    6: ("a query to find an object was unsuccessful", verdicts.REBOOT),
    8: ("a device's external power cables are not properly attached", verdicts.DRAIN_RMA),
    9: ("NVIDIA driver is not loaded", verdicts.REBOOT),
    10: ("NVIDIA Kernel detected an interrupt issue with a GPU", verdicts.REBOOT),
    12: ("NVML Shared Library couldn't be found or loaded", verdicts.FIX_CONFIG),
    13: ("local version of NVML doesn't implement this function", None),
    14: ("infoROM is corrupted", verdicts.DRAIN_RMA),
    15: ("the GPU has fallen off the bus or has otherwise become inaccessible", verdicts.REBOOT),
    255: ("other error or internal driver error occurred", verdicts.REBOOT),
}
# Exit codes whose fault is the GPUs' only where the bus shows GPUs (no GPU at all is not a fault).
_NEEDS_GPUS = (6, 9)

# Values nvidia-smi prints in place of a reading it could not take: -q and CSV ("[Unknown Error]", "GPU is lost",
# "[GPU requires reset]") and the default table ("ERR!"). The GPU-wide ones make the GPU unusable.
GPU_GONE_VALUES = ("gpu is lost", "gpu requires reset")
ERROR_VALUES = ("err!", "unknown error") + GPU_GONE_VALUES
# "ERROR: Option --x is not recognized. Please run 'nvidia-smi -h'." with exit 255 (580.159.04 on the H100,
# tests/device/smi_forms.sh): the caller's command line, never the GPU's fault.
USAGE = re.compile(r"Invalid combination of input arguments|Please run 'nvidia-smi -h'|"
                   r"^\s*Usage: nvidia-smi|^ERROR: Option \S{1,200} is not recognized", re.I | re.M)


@dataclass(frozen=True)
class Failure:
    form: str  # FORMS name, or "exit-<code>"
    action: Optional[str]
    words: str
    bus_id: str = ""  # the GPU it names, '' for the node
    detail: str = ""  # the tool's own line, quoted in the reason
    needs_gpus_on_bus: bool = False

    def said(self) -> str:
        where = f"GPU {self.bus_id}: " if self.bus_id else ""
        quoted = f' ("{self.detail[:160]}")' if self.detail else ""
        return f"{where}{self.words}{quoted}"


def error_value(value: Optional[str]) -> Optional[str]:
    """The error a printed value stands for ('ERR!', 'Unknown Error', 'GPU is lost'), or None for a reading."""
    if value is None:
        return None
    text = value.strip().strip("[]").strip().rstrip(".").lower()
    return text if text in ERROR_VALUES else None


def classify(stdout: str, stderr: str, returncode: Optional[int]) -> list:
    """Every failure form in one nvidia-smi output (both streams), then its exit code where no message explained
    it. [] for a clean output. Total: any text, any code."""
    text = f"{stdout or ''}\n{stderr or ''}"[:1 << 20]
    found: list = []
    for form in FORMS:
        for match in form.pattern.finditer(text):
            groups = match.groupdict()
            line = text[text.rfind("\n", 0, match.start()) + 1:match.end()].strip()
            found.append(Failure(form.name, form.action, form.words, (groups.get("bus") or "").upper(), line,
                                 form.needs_gpus_on_bus))
            if not groups.get("bus"):
                break  # a node-wide message counts once
    if returncode and not found:
        meaning, action = EXIT_CODES.get(returncode, (f"exit status {returncode} (not in nvidia-smi(1))", None))
        if returncode == 2 or USAGE.search(text):
            action, meaning = None, f"{meaning}: it printed its usage"
        found.append(Failure(f"exit-{returncode}", action, f"nvidia-smi exited {returncode}: {meaning}",
                             needs_gpus_on_bus=returncode in _NEEDS_GPUS))
    return found


def printed_usage(text: str) -> bool:
    return bool(USAGE.search(text or ""))
