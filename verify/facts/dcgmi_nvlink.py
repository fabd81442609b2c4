"""NVLink as DCGM's command line prints it, for nodes where DCGM answers and `nvidia-smi nvlink` does not.

`dcgmi nvlink -s` (dcgmi/Nvlink.cpp DisplayNvLinkLinkStatus) prints one row of link states per GPU and per
NVSwitch, one character per link slot DCGM knows (12 or 18), `_` for a slot the device does not have:

    GPUs:
        gpuId 0:
            U U U U U U U U U U U U U U U U U U
    NvSwitches:
        No NvSwitches found.

    Key: Up=U, Down=D, Disabled=X, Not Supported=_

`dcgmi nvlink -e -g <gpu>` (DisplayNvLinkErrorCountsForGpu, a DcgmiOutputTree) prints a box: the header
`NVLINK Error Counts` and `GPU <n>`, then per link a `| Link <n> |` row followed by `| -> <counter> | <count> |`
rows (CRC FLIT Error, CRC Data Error, Replay Error, Recovery Error on DCGM 3; the names are kept as printed,
verify.checks.health_nvlink judges the CRC / replay / recovery ones).

Both parsers are total: any text gives a result, numbers are bounded before int().
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

MAX_DEVICES = 1024
MAX_LINKS = 64
STATES = {"U": "up", "D": "down", "X": "disabled", "_": "not supported"}

_GPU_ROW = re.compile(r"^\s+gpuId (\d{1,4}):\s*$", re.ASCII)
_SWITCH_ROW = re.compile(r"^\s+physicalId (\d{1,6}):\s*$", re.ASCII)
_STATE_ROW = re.compile(r"^\s+([UDX_](?: [UDX_]){0,63})\s*$", re.ASCII)
_ERR_GPU = re.compile(r"^\|\s*GPU (\d{1,4})\s*\|?\s*$", re.ASCII)
_ERR_LINK = re.compile(r"^\|\s*Link (\d{1,3})\s*\|", re.ASCII)
_ERR_COUNTER = re.compile(r"^\|\s*->\s*([A-Za-z][A-Za-z0-9 ]{0,40}?)\s*\|\s*(\d{1,20})\s*\|?\s*$", re.ASCII)


@dataclass
class DcgmiLinkStatus:
    """{device id: [state per link slot]} for GPUs and NVSwitches; states 'up', 'down', 'disabled',
    'not supported'. seen: the text held dcgmi's link-status block (else it is unreadable)."""

    gpus: dict = field(default_factory=dict)
    nvswitches: dict = field(default_factory=dict)
    seen: bool = False

    def gpu_links(self, gpu: int) -> dict:
        """{link: True (up) / False (down or disabled)} for the link slots the GPU has."""
        return {i: state == "up" for i, state in enumerate(self.gpus.get(gpu, [])) if state != "not supported"}


def parse_dcgmi_link_status(text: str) -> DcgmiLinkStatus:
    """`dcgmi nvlink -s` -> DcgmiLinkStatus. Total on any text."""
    status = DcgmiLinkStatus()
    section: Optional[dict] = None
    device: Optional[int] = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "GPUs:":
            section, device, status.seen = status.gpus, None, True
            continue
        if stripped == "NvSwitches:":
            section, device, status.seen = status.nvswitches, None, True
            continue
        if section is None:
            continue
        match = _GPU_ROW.match(line) if section is status.gpus else _SWITCH_ROW.match(line)
        if match:
            device = int(match.group(1))
            continue
        match = _STATE_ROW.match(line)
        if match and device is not None and len(section) < MAX_DEVICES:
            section[device] = [STATES[c] for c in match.group(1).split()][:MAX_LINKS]
            device = None
    return status


@dataclass
class DcgmiErrorCounts:
    gpu: Optional[int]  # the GPU the box names; None when it names none
    links: dict = field(default_factory=dict)  # {link: {counter name: count}}


def parse_dcgmi_nvlink_errors(text: str) -> DcgmiErrorCounts:
    """`dcgmi nvlink -e -g <gpu>` -> DcgmiErrorCounts. Total on any text; a counter row before any Link
    row is not kept (it names no link)."""
    counts = DcgmiErrorCounts(None)
    link: Optional[int] = None
    for line in text.splitlines():
        match = _ERR_GPU.match(line.rstrip())
        if match and counts.gpu is None:
            counts.gpu = int(match.group(1))
            continue
        match = _ERR_LINK.match(line)
        if match:
            link = int(match.group(1))
            if len(counts.links) < MAX_LINKS:
                counts.links.setdefault(link, {})
            continue
        match = _ERR_COUNTER.match(line.rstrip())
        if match and link is not None and link in counts.links:
            counts.links[link][match.group(1).strip()] = int(match.group(2))
    return counts
