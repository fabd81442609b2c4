"""PCIe link of every NVIDIA GPU and every RDMA HCA: trained generation and width against the most
the device and its upstream port both support, from sysfs.

A GPU at idle may train its link down to save power (Gen1 at idle is normal on many boards), so a
GPU's generation below the maximum is a WARN that the host-copy benchmark settles under load;
a narrower width never idles down, so it is a FAIL. HCAs do not idle their links: both are FAILs.
`link_state` is the one reader, for a benchmark to call again while it copies. A GPU below its maximum
generation whose driver gives the Idle clock-event reason ("clocks_event_reasons.gpu_idle: Nothing is
running on the GPU and the clocks are dropping to Idle state", nvidia-smi --help-query-gpu) is PASS: that
is power management, and the under-load check (the hostcopy benchmark) decides.

The kernel's own notice, printed when a device is probed (drivers/pci/pci.c __pcie_print_link_status):
"<bdf>: 31.504 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x4 link at <upstream bdf>
(capable of 126.016 Gb/s with 8.0 GT/s PCIe x16 link)", names the hop anywhere up the path (a switch
uplink, a riser) that caps the device, which its own link files cannot show. It is read for NVIDIA GPUs
and Mellanox / NVIDIA RDMA NICs (sysfs vendor 0x10de / 0x15b3) and is a WARN naming the device and that
port (action `watch`: the host bandwidth is below what the device can do, which the hostcopy / RDMA
benchmarks measure). No profile expresses a required PCIe generation today, so it is never a FAIL here.
The log is read only where a judged device sits under a real PCIe port (its parent has link files): in a
VM the guest's root ports are emulated and their advertised link is not the hardware's.
"""
from __future__ import annotations

import os
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import RESEAT, ROLE
from verify.facts import health_smi
from verify.facts.kernel_log import read_kernel_log
from verify.facts.links import BandwidthNotice, parse_bandwidth_notices
from verify.facts.pci import driver_reason, gpu_indices, nvidia_gpus_on_bus, short_bdf
from verify.judging import peaks, verdicts
from verify.node import Node
from verify.result import Status

# The vendors whose links the notice is judged for: NVIDIA GPUs and Mellanox (NVIDIA networking) NICs.
JUDGED_VENDORS = ("0x10de", "0x15b3")
IDLE_REASON = 0x1  # clocks_event_reasons.gpu_idle in the clocks_throttle_reasons.active bitmask
# The kernel log as (text, source): another reader of the run may have put it here; this check puts it
# here too, so the log is read once per run.
# sysfs current_link_speed / max_link_speed -> generation: the one reader of a PCIe speed (".GT/s" raised in a
# second copy of it here).
gen_of = peaks.pcie_gen_from_speed


def _width(node: Node, path: str) -> Optional[int]:
    value = node.read_value(path)
    return int(value) if value and value.isascii() and value.isdigit() else None


def upstream_port(node: Node, address: str) -> Optional[str]:
    """The bridge (root or switch port) the device's link trains against: its parent in sysfs."""
    real = os.path.realpath(node.path(f"/sys/bus/pci/devices/{address}"))
    parent = os.path.basename(os.path.dirname(real))
    return parent if node.exists(f"/sys/bus/pci/devices/{parent}/max_link_speed") else None


def link_state(node: Node, address: str) -> dict:
    base = f"/sys/bus/pci/devices/{address}"
    state = {"address": address,
             "gen_current": gen_of(node.read_value(f"{base}/current_link_speed")),
             "gen_max": gen_of(node.read_value(f"{base}/max_link_speed")),
             "width_current": _width(node, f"{base}/current_link_width"),
             "width_max": _width(node, f"{base}/max_link_width")}
    port = upstream_port(node, address)
    if port:
        bridge = f"/sys/bus/pci/devices/{port}"
        state.update(upstream=port, upstream_gen_max=gen_of(node.read_value(f"{bridge}/max_link_speed")),
                     upstream_width_max=_width(node, f"{bridge}/max_link_width"))
    return state


def _capable(own: Optional[int], upstream: Optional[int]) -> Optional[int]:
    known = [value for value in (own, upstream) if value]
    return min(known) if known else None


def judge_link(kind: str, name: str, state: dict, idle: bool = False):
    """kind 'gpu' or 'hca'; name: how the report names the device; idle: the driver reports the GPU's
    Idle clock-event reason."""
    check_id = f"health.pcie.{kind}.{state['address']}"
    gen, width = state["gen_current"], state["width_current"]
    want_gen = _capable(state["gen_max"], state.get("upstream_gen_max"))
    want_width = _capable(state["width_max"], state.get("upstream_width_max"))
    if want_gen is None or want_width is None:
        return skip(check_id, ROLE, f"{name}: sysfs gives no PCIe link maximum (virtual or not PCIe-attached)")
    expected, observed = f"Gen{want_gen} x{want_width}", f"Gen{gen or '?'} x{width or '?'}"
    fix = RESEAT.format(what=name)
    if not gen or not width:
        return result(check_id, ROLE, Status.FAIL, expected, observed, f"{name}: PCIe link down",
                      details=state, fix=fix)
    if width < want_width:
        return result(check_id, ROLE, Status.FAIL, expected, observed,
                      f"{name}: link trained at x{width} of x{want_width} (lanes lost: slot, riser or card)",
                      details=state, fix=fix)
    if gen < want_gen and kind == "gpu" and idle:
        return result(check_id, ROLE, Status.PASS, expected, observed,
                      f"{name}: link at Gen{gen} of Gen{want_gen} with the Idle clock-event reason: power "
                      "management; the under-load check (`tunefleet verify --bench hostcopy`) decides",
                      details=dict(state, idle=True))
    if gen < want_gen and kind == "gpu":
        return result(check_id, ROLE, Status.WARN, expected, observed,
                      f"{name}: link at Gen{gen} of Gen{want_gen} while idle (GPUs lower the rate to save power; "
                      "the hostcopy benchmark shows whether it reaches full rate under load)", details=state,
                      fix="run `tunefleet verify --bench hostcopy`; if the copy rate is low too: " + fix)
    if gen < want_gen:
        return result(check_id, ROLE, Status.FAIL, expected, observed,
                      f"{name}: link trained at Gen{gen} of Gen{want_gen}", details=state, fix=fix)
    return result(check_id, ROLE, Status.PASS, expected, observed, details=state)


def hcas(node: Node) -> list:
    """(RDMA device name, PCI address) for each HCA in /sys/class/infiniband."""
    found = []
    for device in node.listdir("/sys/class/infiniband"):
        address = node.readlink_name(f"/sys/class/infiniband/{device}/device")
        if address:
            found.append((device, address))
    return found


def _gpu_name(address: str, indices: dict) -> str:
    index = indices.get(short_bdf(address))
    return f"GPU {index} ({address})" if index is not None else f"GPU at {address}"


def idle_gpus(node: Node) -> set:
    """Short bus ids of the GPUs whose driver reports the Idle clock-event reason (none without a driver)."""
    if driver_reason(node):
        return set()
    gpus, _ = health_smi.query(node)
    idle = set()
    for gpu in gpus:
        reasons = gpu.text("clocks_throttle_reasons.active") or ""
        try:
            if int(reasons, 16) & IDLE_REASON:
                idle.add(short_bdf(gpu.bus_id))
        except ValueError:
            continue
    return idle


def judge_notice(notice: BandwidthNotice, name: str) -> object:
    check_id = f"health.pcie.bandwidth.{notice.address}"
    expected = f"{notice.capable_gbits:g} Gb/s ({notice.capable_gts:g} GT/s x{notice.capable_width})"
    observed = f"{notice.available_gbits:g} Gb/s, limited by {notice.limit_gts:g} GT/s x{notice.limit_width} " \
               f"at {notice.upstream}"
    details = {"address": notice.address, "upstream": notice.upstream, "available_gbits": notice.available_gbits,
               "capable_gbits": notice.capable_gbits, "kernel_line": notice.line,
               verdicts.ACTION_KEY: verdicts.WATCH}
    return result(check_id, ROLE, Status.WARN, expected, observed,
                  f"{name}: the kernel reports {notice.available_gbits:g} of {notice.capable_gbits:g} Gb/s available, "
                  f"limited by the {notice.limit_gts:g} GT/s x{notice.limit_width} link at {notice.upstream}",
                  details=details,
                  fix=f"{verdicts.WORDS[verdicts.WATCH]}; measure it (`tunefleet verify --bench hostcopy`); "
                      "if it is low, " + RESEAT.format(what=f"the link at {notice.upstream}"))


def bandwidth_notices(node: Node, names: dict) -> list:
    """One WARN per judged device the kernel says is capped by a link up its path. names: address -> name."""
    log, _ = read_kernel_log(node)
    if not log:
        return []
    found = []
    for address, notice in sorted(parse_bandwidth_notices(log).items()):
        vendor = (node.read_value(f"/sys/bus/pci/devices/{address}/vendor") or "").lower()
        if vendor not in JUDGED_VENDORS:
            continue  # another device's link (a bridge, a storage controller): not this check's
        found.append(judge_notice(notice, names.get(address, f"device {address}")))
    return found


def run(spec: dict, node: Node) -> list:
    indices = gpu_indices(node)
    devices = [("gpu", _gpu_name(address, indices), address) for address in nvidia_gpus_on_bus(node)]
    devices += [("hca", f"HCA {device} ({address})", address) for device, address in hcas(node)]
    if not devices:
        return [skip("health.pcie", ROLE, "no NVIDIA GPU and no RDMA HCA on the PCI bus")]
    idle = idle_gpus(node) if indices else set()
    states = [(kind, name, link_state(node, address)) for kind, name, address in devices]
    results = [judge_link(kind, name, state, short_bdf(state["address"]) in idle) for kind, name, state in states]
    if not any(state.get("upstream") for _, _, state in states):
        return results  # no real PCIe port above any device (a VM): the kernel's notice would name emulated links
    return results + bandwidth_notices(node, {state["address"]: name for _, name, state in states})
