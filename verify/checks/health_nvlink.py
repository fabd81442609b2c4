"""NVLink: each GPU against its own model's links, and each link's error counters.

`nvidia-smi nvlink -s` prints every link a GPU has, with its speed or `<inactive>` (or, when all are
down, NVML's "all links are inActive" and no Link line); `nvidia-smi nvlink -e` its counters (`Link 3:
Replay Errors: 0`; names vary across drivers, so any `Link N: Name: count` line is kept and the CRC /
replay / recovery ones are judged).

What a GPU should have comes from its MODEL (verify.judging.gpu_models, matched on the name the GPU block
prints): the model's link count and the per-link rate nvidia-smi shows for it. The profile / desired
state may override (`nvlink_links_per_gpu`, `nvlink_link_gbps`). A model the table does not know is
held to the links nvidia-smi lists for it and to its own fastest link; never to another GPU of the node.
PCIe / NVL cards whose NVLink needs a bridge (`nvlink_optional`) without any link are PASS.

The error counters are judged on their own when the link status cannot be had (`nvlink -s` failed, or a
capture holds `nvlink -e` alone): same rates and ceiling, the result says the status half is missing.
Where `nvidia-smi nvlink -s` fails and DCGM answers (`dcgmi nvlink -s`, `dcgmi nvlink -e -g <gpu>`:
verify.facts.dcgmi_nvlink), DCGM's link states and counters are judged the same way; dcgmi prints no link
rate, so the rate is not judged then and the result says so.

Verdicts (docs/verdicts.md holds the table): an inactive or missing link, or a link below its model's
rate, is FAIL with action `reboot` on a baseboard (NVIDIA Health Validation, NVLink checks
`nvlink_active` / `nvlink_bandwidth_count_speed`: "CRITICAL ... Recommended action: operational state
drain, then reset_gpu -> restart_os -> service_required", https://docs.nvidia.com/health-validation/
reference/checks/nvlink; on NVSwitch baseboards the GPUs and switches are reset together, so the node is
drained and restarted, RMA if it recurs) and `drain-rma` of the bridge on a bridged PCIe card (the bridge
is reseated or replaced by hand).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import PREVIOUS_COUNTERS, ROLE, interval_min, judge_counter, threshold
from verify.facts.dcgmi_nvlink import parse_dcgmi_link_status, parse_dcgmi_nvlink_errors
from verify.facts.gpu_query import query_gpus
from verify.facts.links import parse_nvlink_all_inactive, parse_nvlink_gpu_names
from verify.facts.pci import driver_reason
from verify.judging import gpu_models, verdicts
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.result import Status

STATUS_ARGV = ["nvidia-smi", "nvlink", "-s"]
ERRORS_ARGV = ["nvidia-smi", "nvlink", "-e"]
DCGMI_STATUS_ARGV = ["dcgmi", "nvlink", "-s"]
DCGMI_ERRORS_ARGV = ["dcgmi", "nvlink", "-e", "-g"]  # + the GPU id
JUDGED_COUNTERS = ("crc", "replay", "recovery")
# With no earlier reading (the first run, or after a counter reset) one count since driver load is all there
# is: any error is worth a look, and it FAILs only when large.
DERIVED_ERRORS = Threshold(limit=100, warn=0, kind="max", source=(
    "derived: any CRC/replay/recovery error is a WARN; above 100 since the counters were reset is a FAIL"))
# With one, the increase per minute of the interval, as DCGM's NVLink health watch judges these counters
# (DcgmHealthWatch MonitorNVLink, limits in DcgmGpuHardwareLimits.h): CRC errors "only matter at rates of
# 100+ per second" (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR), below that any CRC error is a warning; any replay or
# recovery error is critical (DCGM_LIMIT_MAX_NVLINK_ERROR 1, DCGM_FR_NVLINK_ERROR_CRITICAL).
DERIVED_CRC_PER_MIN = Threshold(limit=6000.0, warn=0, kind="max", source=(
    "derived: DCGM NVLink health watch, CRC errors FAIL at 100 per second (6000/min); any is a WARN"))
DERIVED_REPLAY_PER_MIN = Threshold(limit=0.0, kind="max", source=(
    "derived: DCGM NVLink health watch, any replay or recovery error is critical"))
_GPU = re.compile(r"^GPU (\d+):")
_LINK = re.compile(r"^\s*Link (\d+):\s*(.*)$")
_COUNTER = re.compile(r"^(.*?):\s*(\d+)\s*$")
_SPEED = re.compile(r"^([0-9.]+)\s*GB/s")


class NvlinkParseError(ValueError):
    pass


def _by_gpu(text: str):
    gpu = None
    for line in text.splitlines():
        header = _GPU.match(line)
        if header:
            gpu = int(header.group(1))
            yield gpu, None
            continue
        link = _LINK.match(line)
        if link and gpu is not None:
            yield gpu, (int(link.group(1)), link.group(2).strip())


def parse_status(text: str) -> dict:
    """`nvidia-smi nvlink -s` -> {gpu: {link: GB/s, or None when inactive}}."""
    links: dict = {}
    for gpu, item in _by_gpu(text):
        links.setdefault(gpu, {})
        if item:
            number, state = item
            speed = _SPEED.match(state)
            if not speed and "inactive" not in state.lower():
                raise NvlinkParseError(f"GPU {gpu} link {number}: unreadable state {state[:40]!r}")
            links[gpu][number] = float(speed.group(1)) if speed else None
    if not links and re.search(r"Link \d+:", text):
        raise NvlinkParseError(f"link lines without a 'GPU N:' line: {text.strip()[:80]!r}")
    return links  # {} when the GPUs have no NVLink (the tool prints no GPU block or a note)


def parse_errors(text: str) -> dict:
    """`nvidia-smi nvlink -e` -> {gpu: {link: {counter name: count}}}."""
    counters: dict = {}
    for gpu, item in _by_gpu(text):
        counters.setdefault(gpu, {})
        if item:
            counter = _COUNTER.match(item[1])
            if counter:
                counters[gpu].setdefault(item[0], {})[counter.group(1).strip()] = int(counter.group(2))
    return counters


# The node's previous readings, put in node.memo by the run that knows them (health_common.remember_previous):
# node.memo["previous_counters"] = {check id: counters as that result's details hold them}, here
# {"health.nvlink.<gpu>": {"<link>": {"<counter name>": count}}}, and when they were read. With them the
# counters are judged as the increase per minute since that run; without them (or after a counter reset, when
# a count went down) as the count since driver load.
# nvidia-smi prints the link's signalling rate to 3 decimals (26.562 for 26.5625): 1% under the model's
# printed rate still tells a trained-down link (half rate or less) from rounding.
SPEED_TOLERANCE = 0.99


@dataclass
class Expectation:
    links: Optional[Threshold]
    speed: Threshold
    model: Optional[gpu_models.GpuModel]
    overridden: bool  # the profile or desired state set the link count


def _memory_mib(node: Node, gpu: int) -> Optional[int]:
    inventory = node.memo.get("gpus")  # only what a check already read: no second GPU query for a size
    for entry in getattr(inventory, "gpus", None) or []:
        if entry.index == gpu:
            return entry.memory_mib
    return None


def gpu_name(node: Node, gpu: int, printed: str) -> str:
    """The name nvidia-smi printed in the GPU's block; else the inventory's (NVML or --query-gpu)."""
    if printed:
        return printed
    for entry in query_gpus(node).gpus:
        if entry.index == gpu:
            return entry.name
    return ""


def expectation(spec: dict, node: Node, gpu: int, name: str, links: dict) -> Expectation:
    model = gpu_models.match(name, _memory_mib(node, gpu)) if name else None
    listed = len(links)
    if model is not None and model.nvlink_links:
        derived_links = Threshold(limit=model.nvlink_links, source=(
            f"GPU model {model.key}: {model.nvlink_links} NVLink links per GPU "
            f"(verify.judging.gpu_models; {model.source})"))
    elif model is None and listed:
        derived_links = Threshold(limit=listed, source=(
            "derived: the links nvidia-smi lists for this GPU (its model is not in verify.judging.gpu_models)"))
    else:
        derived_links = None
    own_fastest = max((s for s in links.values() if s is not None and not isinstance(s, bool)), default=0.0)
    if model is not None and model.nvlink_smi_gbps_per_link:
        derived_speed = Threshold(limit=round(model.nvlink_smi_gbps_per_link * SPEED_TOLERANCE, 3), source=(
            f"GPU model {model.key}: nvidia-smi shows {model.nvlink_smi_gbps_per_link:g} GB/s per link "
            "(verify.judging.gpu_models); floor 1% under it"))
    else:
        derived_speed = Threshold(limit=own_fastest or 1e-9, source="derived: the fastest link of this GPU")
    want_links = threshold("nvlink_links_per_gpu", spec, node, derived_links)
    want_speed = threshold("nvlink_link_gbps", spec, node, derived_speed)
    return Expectation(want_links, want_speed, model, want_links is not derived_links)


def _rate_threshold(name: str, rates: dict) -> Threshold:
    return rates["crc"] if "crc" in name.lower() else rates["replay"]


def _judged_counters(gpu: int, errors: dict, node: Node, ceiling: Threshold, rates: dict) -> list:
    """[(link, counter name, CounterVerdict)] of the CRC / replay / recovery counters, against the previous
    reading."""
    previous = ((node.memo.get(PREVIOUS_COUNTERS) or {}).get(f"health.nvlink.{gpu}") or {})
    minutes = interval_min(node)
    judged = []
    for link, named in sorted(errors.items()):
        for name, count in named.items():
            if not any(word in name.lower() for word in JUDGED_COUNTERS):
                continue
            before = (previous.get(str(link)) or {}).get(name)
            judged.append((link, name, judge_counter(f"link {link} {name}", count, before, minutes,
                                                     _rate_threshold(name, rates), ceiling)))
    return judged


def _counter_findings(gpu: int, errors: dict, node: Node, ceiling: Threshold, rates: dict, details: dict) -> list:
    """[(status, action, text)] for the CRC / replay / recovery counters; the figures go into `details`."""
    findings = []
    judged = _judged_counters(gpu, errors, node, ceiling, rates)
    flagged = [(v.status, v.text) for _, _, v in judged if v.status is not Status.PASS]
    if flagged:
        status = Status.FAIL if any(s is Status.FAIL for s, _ in flagged) else Status.WARN
        # A few errors: reset the GPU when idle and watch (verdicts.RESET_GPU); past the ceiling the link is
        # failing: drain and restart the baseboard (same NVIDIA guidance as a down link).
        action = verdicts.REBOOT if status is Status.FAIL else verdicts.RESET_GPU
        findings.append((status, action, "errors: " + ", ".join(text for _, text in flagged)))
    since_last: dict = {}
    per_min: dict = {}
    for link, name, verdict in judged:
        if verdict.increase is not None:
            since_last.setdefault(str(link), {})[name] = verdict.increase
        if verdict.per_min is not None:
            per_min.setdefault(str(link), {})[name] = round(verdict.per_min, 4)
    if since_last:
        details["errors_since_last_run"] = since_last
    if per_min:  # the rate thresholds are shown where they judged something
        details["errors_per_min"] = per_min
        details["errors_interval_min"] = round(interval_min(node) or 0.0, 3)
        details["thresholds"].update(crc_errors_per_min=rates["crc"].to_dict(),
                                     replay_errors_per_min=rates["replay"].to_dict())
    return findings


def bus_of(node: Node, gpu: int) -> str:
    """The GPU's PCI bus id from the inventory a check already read ("" when none is known)."""
    inventory = node.memo.get("gpus")
    for entry in getattr(inventory, "gpus", None) or []:
        if entry.index == gpu:
            return entry.bus_id
    return ""


def judge_counters_only(gpu: int, errors: dict, ceiling: Threshold, node: Node, why: str,
                        rates: Optional[dict] = None):
    """One GPU's NVLink error counters judged without the link status (`why`: what kept it from us)."""
    rates = rates or {"crc": DERIVED_CRC_PER_MIN, "replay": DERIVED_REPLAY_PER_MIN}
    bus = bus_of(node, gpu)
    who = f"GPU {gpu}" + (f" ({bus})" if bus else "")
    details = {"errors": {str(k): v for k, v in sorted(errors.items())}, "links_gbps": None,
               "link_status": f"unread: {why}", "thresholds": {"errors": ceiling.to_dict()}}
    if bus:
        details["bus_id"] = bus
    check_id = f"health.nvlink.{gpu}"
    expected = "no NVLink CRC / replay / recovery errors"
    findings = _counter_findings(gpu, errors, node, ceiling, rates, details)
    counted = sum(1 for named in errors.values() for name in named
                  if any(word in name.lower() for word in JUDGED_COUNTERS))
    if not findings:
        return result(check_id, ROLE, Status.PASS, expected, f"{counted} counters clean on {len(errors)} links",
                      f"{who}: link status not read ({why}); counters judged alone", details=details)
    status = Status.FAIL if any(f[0] is Status.FAIL for f in findings) else Status.WARN
    action = verdicts.worst(f[1] for f in findings)
    details[verdicts.ACTION_KEY] = action
    fix = verdicts.WORDS[action].format(index=gpu, what=f"GPU {gpu}'s NVLink")
    return result(check_id, ROLE, status, expected, "; ".join(f[2] for f in findings),
                  f"{who}: " + "; ".join(f[2] for f in findings) + f" (link status not read: {why})",
                  details=details, fix=fix)


def judge_gpu(gpu: int, name: str, links: dict, errors: dict, want: Expectation, ceiling: Threshold,
              node: Node, all_inactive: bool = False, rates: Optional[dict] = None, source: str = ""):
    """rates: {"crc": Threshold per minute, "replay": the replay / recovery errors' Threshold per minute}.
    source: where the link states came from when it was not `nvidia-smi nvlink -s` ("dcgmi nvlink -s"): the
    states are {link: True (up) / None (down)} then, with no rate to judge."""
    rates = rates or {"crc": DERIVED_CRC_PER_MIN, "replay": DERIVED_REPLAY_PER_MIN}
    check_id = f"health.nvlink.{gpu}"
    who = f"GPU {gpu}" + (f" ({name})" if name else "")
    active = {link: speed for link, speed in links.items() if speed is not None}
    rates_read = not source
    details = {"links_gbps": {str(k): v for k, v in sorted(links.items())} if rates_read else None,
               "errors": {str(k): v for k, v in sorted(errors.items())},
               "thresholds": {"links": want.links.to_dict(), "speed": want.speed.to_dict(),
                              "errors": ceiling.to_dict()}}
    expected = f">= {want.links.limit:.0f} links at >= {want.speed.limit:g} GB/s"
    observed = f"{len(active)} links up"
    if not rates_read:
        details["links_up"] = {str(k): v is not None for k, v in sorted(links.items())}
        details["link_status"] = f"{source} (no link rate: not judged)"
        expected = f">= {want.links.limit:.0f} links up"
    bridged = want.model is not None and want.model.nvlink_optional
    if bridged and not active and not want.overridden:
        # A PCIe / NVL card's NVLink exists only with a bridge; none fitted is a build choice, not a fault.
        return result(check_id, ROLE, Status.PASS, expected, "no NVLink bridge",
                      f"{who}: no NVLink bridge (its NVLink is optional)", details=details)
    findings = []  # (status, action, text)
    link_action = verdicts.DRAIN_RMA if bridged else verdicts.REBOOT
    if len(active) < want.links.limit:
        down = sorted(set(links) - set(active))
        said = f" (inactive: {', '.join(map(str, down))})" if down else ""
        said = said or (" (all links inactive)" if all_inactive else "")
        findings.append((Status.FAIL, link_action, f"{len(active)} of {want.links.limit:.0f} links up" + said))
    elif len(active) < len(links):  # more links listed than the bar asks, some of them down
        down = sorted(set(links) - set(active))
        findings.append((Status.FAIL, link_action, f"inactive: {', '.join(map(str, down))}"))
    slow = {link: speed for link, speed in active.items() if rates_read and speed < want.speed.limit}
    if slow:
        findings.append((Status.FAIL, link_action, "links below " + f"{want.speed.limit:g} GB/s: "
                         + ", ".join(f"{link} at {speed:g}" for link, speed in sorted(slow.items()))))
    findings += _counter_findings(gpu, errors, node, ceiling, rates, details)
    said = f" (link states from {source}; link rate not read)" if source else ""
    if not findings:
        return result(check_id, ROLE, Status.PASS, expected, observed, f"{who}: {observed}{said}" if said else "",
                      details=details)
    status = Status.FAIL if any(f[0] is Status.FAIL for f in findings) else Status.WARN
    action = verdicts.worst(f[1] for f in findings)
    details[verdicts.ACTION_KEY] = action
    part = f"the NVLink bridge of GPU {gpu}" if bridged else f"GPU {gpu}'s NVLink (baseboard)"
    fix = verdicts.WORDS[action].format(index=gpu, what=part)
    return result(check_id, ROLE, status, expected, observed, f"{who}: " + "; ".join(f[2] for f in findings) + said,
                  details=details, fix=fix)


def run(spec: dict, node: Node) -> list:
    reason = driver_reason(node)
    if reason:
        return [skip("health.nvlink", ROLE, reason)]
    ceiling = threshold("nvlink_error_count", spec, node, DERIVED_ERRORS)
    rates = {"crc": threshold("nvlink_crc_errors_per_min", spec, node, DERIVED_CRC_PER_MIN),
             "replay": threshold("nvlink_replay_errors_per_min", spec, node, DERIVED_REPLAY_PER_MIN)}
    out = node.run(STATUS_ARGV, timeout_s=20.0)
    if not out.ok:
        why = "nvidia-smi is not installed" if out.missing else (out.stderr or out.stdout or "failed").strip()[:160]
        from_dcgm = _from_dcgmi(spec, node, ceiling, rates)
        if from_dcgm:
            return from_dcgm
        alone = _counters_alone(node, f"nvidia-smi nvlink -s: {why}", ceiling, rates)
        return alone or [skip("health.nvlink", ROLE, f"nvidia-smi nvlink -s: {why}")]
    links = parse_status(out.stdout)
    if not links:
        wanted = threshold("nvlink_links_per_gpu", spec, node, None)
        if wanted is None:
            return [skip("health.nvlink", ROLE, "no active NVLink on any GPU and no nvlink_links_per_gpu expected")]
        return [result("health.nvlink", ROLE, Status.FAIL, f">= {wanted.limit:.0f} links per GPU", "none",
                       f"nvidia-smi reports no NVLink: {out.stdout.strip()[:120]!r}",
                       details={verdicts.ACTION_KEY: verdicts.REBOOT},
                       fix=verdicts.WORDS[verdicts.REBOOT])]
    printed = parse_nvlink_gpu_names(out.stdout)
    all_inactive = parse_nvlink_all_inactive(out.stdout)
    judged = []
    for gpu, per in sorted(links.items()):
        name = gpu_name(node, gpu, printed.get(gpu, ""))
        want = expectation(spec, node, gpu, name, per)
        if want.links is not None:
            judged.append((gpu, name, per, want))
    if not judged:
        return [skip("health.nvlink", ROLE, "no active NVLink on any GPU and no nvlink_links_per_gpu expected")]
    any_active = any(s is not None for _, _, per, _ in judged for s in per.values())
    errors_out = node.run(ERRORS_ARGV, timeout_s=20.0) if any_active else None
    errors = parse_errors(errors_out.stdout) if errors_out is not None and errors_out.ok else {}
    return [judge_gpu(gpu, name, per, errors.get(gpu, {}), want, ceiling, node, gpu in all_inactive, rates)
            for gpu, name, per, want in judged]


def _counters_alone(node: Node, why: str, ceiling: Threshold, rates: dict) -> list:
    """The counters judged without the link status, for each GPU `nvlink -e` lists with any; [] when none."""
    out = node.run(ERRORS_ARGV, timeout_s=20.0)
    errors = parse_errors(out.stdout) if out.ok else {}
    return [judge_counters_only(gpu, per, ceiling, node, why, rates)
            for gpu, per in sorted(errors.items()) if per]


def _from_dcgmi(spec: dict, node: Node, ceiling: Threshold, rates: dict) -> list:
    """Each GPU judged from DCGM's link states and counters (`dcgmi nvlink -s`, `-e -g <gpu>`), where
    `nvidia-smi nvlink -s` gave none; [] when dcgmi does not answer either (not installed, no host engine)."""
    out = node.run(DCGMI_STATUS_ARGV, timeout_s=20.0)
    status = parse_dcgmi_link_status(out.stdout) if out.ok else None
    if status is None or not status.gpus:
        return []
    judged = []
    for gpu in sorted(status.gpus):
        links = {link: (True if up else None) for link, up in status.gpu_links(gpu).items()}
        if not links:
            continue  # every slot "not supported": no NVLink on this GPU
        counted = node.run(DCGMI_ERRORS_ARGV + [str(gpu)], timeout_s=20.0)
        counts = parse_dcgmi_nvlink_errors(counted.stdout) if counted.ok else None
        errors = counts.links if counts is not None and counts.gpu in (None, gpu) else {}
        name = gpu_name(node, gpu, "")
        want = expectation(spec, node, gpu, name, links)
        if want.links is None:
            continue
        judged.append(judge_gpu(gpu, name, links, errors, want, ceiling, node, rates=rates,
                                source="dcgmi nvlink -s"))
    return judged
