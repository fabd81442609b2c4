# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Path MTU peers for the whole fleet at once (issue 38), computed once on the controller.

Pinging every other host on every cluster interface is N² probes (8 million for 1,000 hosts with 8
rails), and building each host's list walked every other host's facts: O(N) controller work per host.
Instead each host pings `count` peers per interface, and the whole map is built in one pass,
O(N·I·(log N + count)) for N hosts and I interfaces.

The hosts with an address on an interface form a ring in natural name order (names usually follow
racks: gpu-r01-n02 sits beside gpu-r01-n03). Host i pings the hosts at ring offsets d_1..d_count:
offset 1 is its neighbour (mostly the same leaf switch), the others are spread over half the ring
(across the spine), so a switch port left at a smaller MTU is crossed from several sides. Each offset
is a rotation of the ring, so every host is also pinged by exactly `count` hosts: the accusers
verify/fleet/blame.py needs to blame a host everybody fails to reach. While `count` fits in half the
ring no two offsets add up to its size, so no pair is probed twice and each host is in 2·count pairs.
"""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

ALL = "all"
VARIABLE = "verify_node_path_mtu_peers_per_interface"
# verify/fleet/blame.py MIN_ACCUSERS: a host is blamed only when two hosts cannot reach it, so fewer
# pingers per host could never name it (tests/unit/test_path_mtu_peers.py keeps the two equal).
MIN_PEERS = 2
# The key of the default route's address: the interface a host with no network_interfaces pings on.
DEFAULT_ROUTE = ""
_DIGITS = re.compile(r"([0-9]+)")


def peer_count(value) -> int:
    """The validated number of peers per interface; 0 means every other host (`all`)."""
    if isinstance(value, str) and value.strip().lower() == ALL:
        return 0
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    if number is None or number < MIN_PEERS:
        raise AnsibleFilterError(
            f"{VARIABLE} must be '{ALL}' or a whole number of at least {MIN_PEERS} (the path MTU blame needs "
            f"{MIN_PEERS} hosts that ping each host), got {value!r}")
    return number


def fact_key(interface: str) -> str:
    """The ansible_facts key of an interface: the setup module writes ':' as '_' and the facts
    namespace '-' as '_'."""
    return interface.replace(":", "_").replace("-", "_")


def verify_node_path_mtu_addresses(facts: dict, interfaces: list) -> dict:
    """{interface: this host's IPv4 address on it} for the interfaces its path MTU check pings on: each
    of network_interfaces, or the default route's (key '') when it names none. An interface without an
    IPv4 address is left out: the host neither pings nor is pinged on it."""
    facts = facts if isinstance(facts, dict) else {}
    if not interfaces:
        address = (facts.get("default_ipv4") or {}).get("address")
        return {DEFAULT_ROUTE: address} if address else {}
    out = {}
    for interface in interfaces:
        address = ((facts.get(fact_key(str(interface))) or {}).get("ipv4") or {}).get("address")
        if address:
            out[str(interface)] = address
    return out


def natural_key(name: str) -> tuple:
    """gpu-2 before gpu-10; the name itself breaks ties (gpu-01 and gpu-1)."""
    parts = _DIGITS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def ring_offsets(size: int, count: int) -> list:
    """`count` distinct offsets in 1..size-1 (every one when count is 0 or reaches size-1): 1, then
    spread evenly over half the ring; past half the ring, the complements from size-1 down."""
    if count == 0 or count >= size - 1:
        return list(range(1, size))
    half = (size - 1) // 2
    if count <= half:
        return [1 + (j * half) // count for j in range(count)]
    return list(range(1, half + 1)) + list(range(size - 1, size - 1 - (count - half), -1))


def verify_node_path_mtu_peer_map(addresses_by_host: dict, peers_per_interface=3) -> dict:
    """host -> the addresses its path MTU check pings (network_path_mtu_peers), for every host at once.

    addresses_by_host: host -> verify_node_path_mtu_addresses of that host ({} when it has none).
    A host pings, on each of its interfaces, `peers_per_interface` hosts of the ring of that interface
    (every other one for 'all'), and is pinged by as many; each host's record is read once.
    """
    count = peer_count(peers_per_interface)
    if not isinstance(addresses_by_host, dict):
        raise AnsibleFilterError(f"verify_node_path_mtu_peer_map: expected host -> addresses, got "
                                 f"{type(addresses_by_host).__name__}")
    rings: dict = {}  # interface -> [(sort key, host, address)]
    for host, addresses in addresses_by_host.items():
        if not isinstance(addresses, dict):
            raise AnsibleFilterError(f"verify_node_path_mtu_peer_map: the addresses of {host} are not a mapping")
        key = natural_key(str(host))
        for interface, address in addresses.items():
            rings.setdefault(interface, []).append((key, host, str(address)))
    out: dict = {host: [] for host in addresses_by_host}
    for ring in rings.values():
        ring.sort()
        size = len(ring)
        offsets = ring_offsets(size, count)
        for index, (_, host, _) in enumerate(ring):
            out[host].extend(ring[(index + offset) % size][2] for offset in offsets)
    return out


class FilterModule:
    def filters(self):
        return {
            "verify_node_path_mtu_addresses": verify_node_path_mtu_addresses,
            "verify_node_path_mtu_peer_map": verify_node_path_mtu_peer_map,
        }
