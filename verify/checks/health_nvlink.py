"""NVLink: every expected link up at the expected speed, and its error counters, per GPU.

`nvidia-smi nvlink -s` gives each link's speed or `<inactive>`; `nvidia-smi nvlink -e` its counters
(`Link 3: Replay Errors: 0`; counter names vary across drivers, so any `Link N: Name: count` line is
kept and the CRC / replay / recovery ones are judged). Expected links and speed come from the
profile (`nvlink_links_per_gpu`, `nvlink_link_gbps`); without one, the node's own best GPU sets them.
"""
from __future__ import annotations

import re

from verify.checks.common import result, skip
from verify.checks.health_common import RESET_GPU, ROLE, threshold
from verify.facts.pci import driver_reason
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.result import Status

STATUS_ARGV = ["nvidia-smi", "nvlink", "-s"]
ERRORS_ARGV = ["nvidia-smi", "nvlink", "-e"]
JUDGED_COUNTERS = ("crc", "replay", "recovery")
# Any error is worth a look; a one-shot count since the last reset FAILs only when large, because
# DCGM's NVLink health watch judges these counters by their rate, which one reading cannot give.
DERIVED_ERRORS = Threshold(limit=100, warn=0, kind="max", source=(
    "derived: any CRC/replay/recovery error is a WARN; above 100 since the counters were reset is a FAIL"))
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


def judge_gpu(gpu: int, links: dict, errors: dict, want_links: Threshold, want_speed: Threshold, ceiling: Threshold):
    check_id = f"health.nvlink.{gpu}"
    active = {link: speed for link, speed in links.items() if speed is not None}
    findings = []
    if len(active) < want_links.limit:
        down = sorted(set(links) - set(active))
        findings.append((Status.FAIL, f"{len(active)} of {want_links.limit:.0f} links up"
                         + (f" (inactive: {', '.join(map(str, down))})" if down else "")))
    slow = {link: speed for link, speed in active.items() if speed < want_speed.limit}
    if slow:
        findings.append((Status.FAIL, "links below " + f"{want_speed.limit:g} GB/s: "
                         + ", ".join(f"{link} at {speed:g}" for link, speed in sorted(slow.items()))))
    judged = [(ceiling.judge(count)[0], f"link {link} {name} {count}") for link, named in sorted(errors.items())
              for name, count in named.items() if any(word in name.lower() for word in JUDGED_COUNTERS)]
    flagged = [(status, text) for status, text in judged if status is not Status.PASS]
    if flagged:
        status = Status.FAIL if any(s is Status.FAIL for s, _ in flagged) else Status.WARN
        findings.append((status, "errors: " + ", ".join(text for _, text in flagged)))
    details = {"links_gbps": {str(k): v for k, v in sorted(links.items())},
               "errors": {str(k): v for k, v in sorted(errors.items())},
               "thresholds": {"links": want_links.to_dict(), "speed": want_speed.to_dict(),
                              "errors": ceiling.to_dict()}}
    expected = f">= {want_links.limit:.0f} links at >= {want_speed.limit:g} GB/s"
    observed = f"{len(active)} links up"
    if not findings:
        return result(check_id, ROLE, Status.PASS, expected, observed, details=details)
    status = Status.FAIL if any(f[0] is Status.FAIL for f in findings) else Status.WARN
    return result(check_id, ROLE, status, expected, observed, f"GPU {gpu}: " + "; ".join(t for _, t in findings),
                  details=details, fix=RESET_GPU.format(index=gpu) + " (NVLink: check the baseboard / bridge)")


def run(spec: dict, node: Node) -> list:
    reason = driver_reason(node)
    if reason:
        return [skip("health.nvlink", ROLE, reason)]
    out = node.run(STATUS_ARGV, timeout_s=20.0)
    if not out.ok:
        why = "nvidia-smi is not installed" if out.missing else (out.stderr or out.stdout or "failed").strip()[:160]
        return [skip("health.nvlink", ROLE, f"nvidia-smi nvlink -s: {why}")]
    links = parse_status(out.stdout)
    most = max((sum(s is not None for s in per.values()) for per in links.values()), default=0)
    want_links = threshold("nvlink_links_per_gpu", spec, node, Threshold(
        limit=most, source="derived: the most active links any GPU of this node has")) if most else \
        threshold("nvlink_links_per_gpu", spec, node, None)
    if want_links is None:
        return [skip("health.nvlink", ROLE, "no active NVLink on any GPU and no nvlink_links_per_gpu expected")]
    if not links:
        return [result("health.nvlink", ROLE, Status.FAIL, f">= {want_links.limit:.0f} links per GPU", "none",
                       f"nvidia-smi reports no NVLink: {out.stdout.strip()[:120]!r}",
                       fix="drain the node; check the NVLink baseboard / bridges and the fabric manager")]
    fastest = max((s for per in links.values() for s in per.values() if s is not None), default=0.0)
    want_speed = threshold("nvlink_link_gbps", spec, node, Threshold(
        limit=fastest or 1e-9, source="derived: the fastest link of this node"))
    ceiling = threshold("nvlink_error_count", spec, node, DERIVED_ERRORS)
    errors_out = node.run(ERRORS_ARGV, timeout_s=20.0) if most else None
    errors = parse_errors(errors_out.stdout) if errors_out is not None and errors_out.ok else {}
    return [judge_gpu(gpu, per, errors.get(gpu, {}), want_links, want_speed, ceiling)
            for gpu, per in sorted(links.items())]
