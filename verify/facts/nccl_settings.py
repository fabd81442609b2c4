"""The NCCL settings a run inherits and where each one was set: the environment, then the configuration
files NCCL reads (NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf; NCCL's environment-variable
documentation: a variable set in the environment wins over the files).

`parse_nccl_conf` is the one reader of the file format (KEY=VALUE, `#` comment lines), with line numbers,
so a slow all-reduce can say "because NCCL_P2P_DISABLE=1 (/etc/nccl.conf line 3)" and the gpu.nccl_conf
check reads the same file the same way.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from verify.node import Node

SYSTEM_CONF = "/etc/nccl.conf"


class NcclConfParseError(ValueError):
    pass


@dataclass(frozen=True)
class Setting:
    key: str
    value: str
    origin: str  # "the environment" or the file's path
    line: Optional[int] = None

    def describe(self) -> str:
        where = f"{self.origin} line {self.line}" if self.line else self.origin
        return f"{self.key}={self.value} ({where})"


def parse_nccl_conf(text: str, origin: str = SYSTEM_CONF) -> dict:
    """NCCL's `KEY=VALUE` lines -> {key: Setting}; `#` starts a comment line. Raises NcclConfParseError."""
    found: dict = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise NcclConfParseError(f"line {number} is not KEY=VALUE: {line[:60]!r}")
        key, value = line.split("=", 1)
        found[key.strip()] = Setting(key.strip(), value.strip(), origin, number)
    return found


def effective(node: Node, environment: Optional[Mapping[str, str]] = None, home: Optional[str] = None) -> dict:
    """{key: Setting} of every NCCL_* setting a process started now would get: the environment's, over the
    first configuration file NCCL reads. A file that cannot be parsed is left out (gpu.nccl_conf says why)."""
    environment = os.environ if environment is None else environment
    conf = environment.get("NCCL_CONF_FILE")
    # NCCL (src/misc/param.cc initEnv) reads NCCL_CONF_FILE alone, else ~/.nccl.conf and then /etc/nccl.conf,
    # each setting only what is not set yet: the first file's line wins, the environment over both.
    candidates = [conf] if conf else [os.path.join(home or os.path.expanduser("~"), ".nccl.conf"), SYSTEM_CONF]
    settings: dict = {}
    for path in reversed(candidates):
        text = node.read(path)
        if text is None:
            continue
        try:
            settings.update(parse_nccl_conf(text, path))
        except NcclConfParseError:
            continue
    for key, value in environment.items():
        if key.startswith("NCCL_"):
            settings[key] = Setting(key, str(value), "the environment")
    return settings


def _int(value: str) -> Optional[int]:
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


# Settings that take a transport or bandwidth away from an intra-node all-reduce, and what each does (NCCL
# documentation, "Environment Variables"). A setting is named as the cause only with the transport that
# agrees with it (no P2P path seen where P2P is off), see limiting().
def _p2p_off(value: str) -> bool:
    return value.strip() == "1"


def _p2p_level_local(value: str) -> bool:
    return value.strip().upper() in ("LOC", "0")


LIMITS = {
    "NCCL_P2P_DISABLE": (_p2p_off, "turns off the peer-to-peer transport (NVLink / PCIe P2P)", "P2P"),
    "NCCL_P2P_LEVEL": (_p2p_level_local, "allows peer-to-peer only within one GPU", "P2P"),
    "NCCL_SHM_DISABLE": (_p2p_off, "turns off the shared-memory transport", "SHM"),
    "NCCL_MAX_NCHANNELS": (lambda v: (_int(v) or 99) < 8, "caps the channels NCCL may use", None),
    "NCCL_MAX_CTAS": (lambda v: (_int(v) or 99) < 8, "caps the CTAs (channels) NCCL may use", None),
    "NCCL_ALGO": (lambda v: bool(v.strip()), "forces the algorithm", None),
    "NCCL_PROTO": (lambda v: bool(v.strip()), "forces the protocol", None),
}


def limiting(settings: dict, transports: list) -> list:
    """[(Setting, what it does)] that can explain a slow intra-node all-reduce. A setting that turns a
    transport off counts when that transport was not used (`transports`: NCCL's coarse kinds, P2P, SHM,
    NET/Socket ...; empty when NCCL said nothing, then every limiting setting counts)."""
    found = []
    for key, (limits, what, transport) in LIMITS.items():
        setting = settings.get(key)
        if setting is None or not limits(setting.value):
            continue
        if transport and transports and transport in transports:
            continue  # the transport it would turn off was used: not this
        found.append((setting, what))
    return found
