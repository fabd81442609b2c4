"""Ring sizes (`ethtool -g`) and channel counts (`ethtool -l`) per tuned interface."""
from __future__ import annotations

from typing import Optional

from verify.checks.common import error, result, role_disabled, section, skip
from verify.checks.interfaces import nothing_selected_reason, select_interfaces
from verify.node import Node
from verify.result import Status

ROLE = "network"
# ethtool's labels -> the keys used in network_ring / network_channels
RING_KEYS = {"RX": "rx", "RX Mini": "rx_mini", "RX Jumbo": "rx_jumbo", "TX": "tx"}
CHANNEL_KEYS = {"RX": "rx", "TX": "tx", "Other": "other", "Combined": "combined"}


class EthtoolParseError(ValueError):
    pass


def parse_sections(text: str, labels: dict) -> dict:
    """`ethtool -g/-l` text -> {"max": {...}, "current": {...}}; n/a values are left out."""
    sections: dict = {"max": {}, "current": {}}
    current: Optional[dict] = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Pre-set maximums"):
            current = sections["max"]
            continue
        if line.startswith("Current hardware settings"):
            current = sections["current"]
            continue
        if current is None or ":" not in line:
            continue
        label, value = (part.strip() for part in line.split(":", 1))
        if label not in labels or value.lower() == "n/a":
            continue
        try:
            current[labels[label]] = int(value)
        except ValueError:
            raise EthtoolParseError(f"ethtool printed {label}: {value!r}, not a number") from None
    if not sections["current"]:
        raise EthtoolParseError("ethtool printed no 'Current hardware settings' values")
    return sections


def judge(check_id: str, variable: str, wanted: dict, parsed: dict):
    """wanted values may be an int or "max" (the NIC's pre-set maximum)."""
    expected, mismatched = {}, []
    for key, value in sorted(wanted.items()):
        target = parsed["max"].get(key) if str(value) == "max" else int(value)
        expected[key] = target
        if parsed["current"].get(key) != target:
            mismatched.append(f"{key} {parsed['current'].get(key)} (want {target})")
    observed = {k: parsed["current"].get(k) for k in expected}
    if not mismatched:
        return result(check_id, ROLE, Status.PASS, expected, observed, details=parsed)
    return result(check_id, ROLE, Status.FAIL, expected, observed, "; ".join(mismatched), variable, parsed)


def check_one(node: Node, name: str, kind: str, wanted: dict):
    flag, labels, variable = ("-g", RING_KEYS, "network_ring") if kind == "ring" else ("-l", CHANNEL_KEYS,
                                                                                        "network_channels")
    check_id = f"network.{kind}.{name}"
    out = node.run(["ethtool", flag, name], timeout_s=5.0)
    if out.missing:
        return error(check_id, ROLE, "ethtool is not installed", wanted)
    if not out.ok:
        message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1]
        if "not supported" in message.lower():
            return skip(check_id, ROLE, f"{name}'s driver does not report {kind} parameters ({message})", wanted)
        return error(check_id, ROLE, f"ethtool {flag} {name} failed: {message}", wanted)
    try:
        parsed = parse_sections(out.stdout, labels)
    except EthtoolParseError as exc:
        return error(check_id, ROLE, f"{name}: {exc}", wanted)
    return judge(check_id, variable, wanted, parsed)


def run_kind(spec: dict, node: Node, kind: str) -> list:
    disabled = role_disabled(spec, ROLE, f"network.{kind}")
    if disabled:
        return [disabled]
    network = section(spec, ROLE)
    wanted = network.get("ring" if kind == "ring" else "channels") or {}
    if not wanted:
        return [skip(f"network.{kind}", ROLE, f"network_{'ring' if kind == 'ring' else 'channels'} is empty")]
    selection = select_interfaces(network, node)
    if not selection.present:
        return [skip(f"network.{kind}", ROLE, nothing_selected_reason())]
    if not node.is_live:
        return [skip(f"network.{kind}.{n}", ROLE, "ethtool reads the live node only (--root is set)")
                for n in selection.present]
    return [check_one(node, name, kind, wanted) for name in selection.present]


def run_ring(spec: dict, node: Node) -> list:
    return run_kind(spec, node, "ring")


def run_channels(spec: dict, node: Node) -> list:
    return run_kind(spec, node, "channels")
