"""Filters for the gpu role: turn gpu_nccl_conf into checked nccl.conf lines."""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

# Names the seeds print that NCCL does not read (seed_catalogue Appendix B): refusing them
# beats writing a line that silently does nothing.
SEED_ERRATA = {
    "NCCL_SHARP_ENABLE": "use NCCL_COLLNET_ENABLE (IB SHARP) or NCCL_NVLS_ENABLE (NVLink SHARP)",
    "NCCL_SHARP_DISABLE": "use NCCL_COLLNET_ENABLE (IB SHARP) or NCCL_NVLS_ENABLE (NVLink SHARP)",
    "NCCL_SHARP_CAPABLE": "use NCCL_COLLNET_ENABLE (IB SHARP) or NCCL_NVLS_ENABLE (NVLink SHARP)",
    "NCCL_NCCL_MAX_RINGS": "use NCCL_MAX_NCHANNELS (the seed's name is a typo of a legacy variable)",
    "NCCL_MAX_RINGS": "use NCCL_MAX_NCHANNELS (NCCL_MAX_RINGS is legacy)",
}
NAME = re.compile(r"NCCL_[A-Z0-9_]+")


def gpu_nccl_conf_lines(settings: object) -> list:
    """{'NCCL_DEBUG': 'WARN'} -> ['NCCL_DEBUG=WARN'], sorted; one clear error for any bad entry."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"gpu_nccl_conf must be a mapping of NCCL_* names to values, got {settings!r}")
    lines = []
    for name in sorted(settings):
        value = settings[name]
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise AnsibleFilterError(f"gpu_nccl_conf: {name!r} is not an NCCL variable name (NCCL_[A-Z0-9_]+)")
        if name in SEED_ERRATA:
            raise AnsibleFilterError(f"gpu_nccl_conf: NCCL does not read {name}: {SEED_ERRATA[name]}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise AnsibleFilterError(
                f"gpu_nccl_conf.{name}: {value!r} must be a string or an integer (quote YAML booleans: '1' or '0')"
            )
        text = str(value)
        if not text or any(ch in text for ch in "\n\r") or text != text.strip():
            raise AnsibleFilterError(f"gpu_nccl_conf.{name}: {text!r} must be one line without surrounding spaces")
        lines.append(f"{name}={text}")
    return lines


class FilterModule:
    def filters(self) -> dict:
        return {"gpu_nccl_conf_lines": gpu_nccl_conf_lines}
