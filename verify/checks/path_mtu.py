"""End-to-end path MTU to network_path_mtu_peers: one `ping -M do` at the largest payload.

A switch port left at 1500 drops jumbo frames silently or answers "Frag needed"; a local MTU
below the target fails before sending. A second small ping tells "path too small" from
"peer down".
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from verify.checks.common import error, result, role_disabled, section, skip
from verify.node import Node
from verify.result import Status
from verify.runner import CommandOutput
from verify.safe_io import check_not_option

ROLE = "network"
SMALL_PAYLOAD = {4: 1472, 6: 1452}  # fits a 1500 MTU path
HEADERS = {4: 28, 6: 48}  # IPv4 20 + ICMP 8; IPv6 40 + ICMPv6 8

_STATS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_LOCAL = re.compile(r"local error: message too long, mtu=(\d+)")
_FRAG = re.compile(r"Frag needed and DF set \(mtu = (\d+)\)|Packet too big: mtu=(\d+)")


class PingParseError(ValueError):
    pass


@dataclass
class PingOutcome:
    transmitted: int
    received: int
    local_mtu: Optional[int] = None  # our own interface refused the size
    path_mtu: Optional[int] = None  # a hop answered with its smaller MTU


def parse_ping(stdout: str, stderr: str) -> PingOutcome:
    stats = _STATS.search(stdout)
    if not stats:
        message = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
        raise PingParseError(f"ping printed no statistics: {message[:120]}")
    outcome = PingOutcome(int(stats.group(1)), int(stats.group(2)))
    local = _LOCAL.search(stderr + stdout)
    if local:
        outcome.local_mtu = int(local.group(1))
    frag = _FRAG.search(stdout + stderr)
    if frag:
        outcome.path_mtu = int(frag.group(1) or frag.group(2))
    return outcome


def ip_version(peer: str) -> int:
    return 6 if ":" in peer else 4


def ping_argv(peer: str, payload: int) -> list:
    return ["ping", "-M", "do", "-s", str(payload), "-c", "1", "-W", "2", peer]


def judge(peer: str, mtu: int, big: PingOutcome, small: Optional[PingOutcome]):
    check_id = f"network.path_mtu.{peer}"
    variable = "network_mtu"
    if big.received > 0:
        return result(check_id, ROLE, Status.PASS, mtu, mtu, f"{mtu}-byte packets reach {peer} unfragmented")
    if big.local_mtu is not None:
        return result(check_id, ROLE, Status.FAIL, mtu, big.local_mtu,
                      f"the local route to {peer} has MTU {big.local_mtu}, below {mtu}", variable)
    if big.path_mtu is not None:
        return result(check_id, ROLE, Status.FAIL, mtu, big.path_mtu,
                      f"a hop on the path to {peer} has MTU {big.path_mtu} (Frag needed), below {mtu}", variable)
    if small is not None and small.received > 0:
        return result(check_id, ROLE, Status.FAIL, mtu, f"< {mtu}",
                      f"{peer} answers small pings but not {mtu}-byte ones: a switch port or the peer "
                      f"is below MTU {mtu}", variable)
    return error(check_id, ROLE, f"{peer} does not answer ping at all: cannot measure the path MTU", mtu)


def probe(node: Node, peer: str, payload: int) -> CommandOutput:
    return node.run(ping_argv(peer, payload), timeout_s=5.0)


def check_peer(node: Node, peer: str, mtu: int):
    try:  # an inventory value reaches ping's argv: never one ping could read as an option
        check_not_option(peer, "network_path_mtu_peers entry")
    except ValueError as exc:
        return error(f"network.path_mtu.{peer[:40]}", ROLE, str(exc), mtu)
    version = ip_version(peer)
    out = probe(node, peer, mtu - HEADERS[version])
    if out.missing:
        return error(f"network.path_mtu.{peer}", ROLE, "ping is not installed (Debian: iputils-ping)", mtu)
    try:
        big = parse_ping(out.stdout, out.stderr)
    except PingParseError as exc:
        return error(f"network.path_mtu.{peer}", ROLE, str(exc), mtu)
    small = None
    if big.received == 0 and big.local_mtu is None and big.path_mtu is None:
        try:
            small_out = probe(node, peer, SMALL_PAYLOAD[version])
            small = parse_ping(small_out.stdout, small_out.stderr)
        except PingParseError:
            small = None
    return judge(peer, mtu, big, small)


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "network.path_mtu")
    if disabled:
        return [disabled]
    network = section(spec, ROLE)
    peers = [str(p) for p in (network.get("path_mtu_peers") or [])]
    mtu = network.get("mtu")
    if not peers:
        return [skip("network.path_mtu", ROLE, "network_path_mtu_peers is empty: no peer to ping")]
    if not mtu:
        return [skip("network.path_mtu", ROLE, "network_mtu is not set")]
    if not node.is_live:
        return [skip(f"network.path_mtu.{p}", ROLE, "path MTU is measured on the live node only (--root is set)")
                for p in peers]
    return [check_peer(node, peer, int(mtu)) for peer in peers]
