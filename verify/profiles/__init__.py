"""Hardware profiles: benchmark thresholds per hardware class, each number with its source.

A profile is a JSON file in this folder. Its `thresholds` map a threshold key (see KEYS) to
`{"min": x, "warn": y, "source": "..."}` (or `"max"` for latencies). The desired state's
`verify.thresholds` overrides any key (a bare number sets the limit), and keys a profile does not
give fall back to values derived from the node itself (port rate, PCIe link, NVLink count).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from verify.judging.thresholds import Threshold
from verify.profiles import by_model as by_model_profiles

PROFILE_DIR = Path(__file__).resolve().parent

# Threshold keys a profile or verify_thresholds may set, with the unit each is in.
KEYS = {
    "nccl_allreduce_busbw_gbps": "GB/s busbw at the largest size",
    "nccl_allreduce_internode_busbw_gbps": "GB/s busbw at the largest size, all-reduce across nodes (fleet)",
    "h2d_gbps": "GB/s pinned host-to-device per GPU",
    "d2h_gbps": "GB/s pinned device-to-host per GPU",
    "hostcopy_pcie_ratio": "fraction of the PCIe link's theoretical rate",
    "rdma_bw_port_ratio": "fraction of the port rate (x2 bidirectional)",
    "rdma_bw_gbps": "Gb/s perftest average bandwidth",
    "rdma_lat_us": "us perftest typical latency (a ceiling)",
    "storage_odirect_gbps": "GB/s O_DIRECT 1 MiB reads",
    "storage_cufile_gbps": "GB/s cuFile reads into GPU memory",
    "gds_vs_cpu_ratio": "gdsio GPU-direct throughput / CPU path throughput",
    "gpu_hbm_gbps": "GB/s device-to-device copy per GPU, read + write counted (verify/bench/gpu.py)",
    "gpu_matmul_bf16_tflops": "TFLOPS BF16 8192^3 matmul per GPU",
    "gpu_copy_gbps": "GB/s GPU-to-GPU copy, one ordered pair, one way",
    "gpu_copy_bidir_gbps": "GB/s GPU-to-GPU copy, each direction while both ways run at once",
    # hardware health (verify/checks/health_*.py)
    "gpu_count": "GPUs the driver must list (default: the profile's gpu_count)",
    "gpu_temp_margin_c": "degrees C of headroom below the GPU's slowdown limit (T.Limit)",
    "nvlink_links_per_gpu": "active NVLink links per GPU",
    "nvlink_link_gbps": "GB/s per NVLink link as nvidia-smi nvlink -s reports it",
    "nvlink_error_count": "CRC/replay/recovery errors per link counter since driver load (a ceiling; judged "
                          "when no earlier reading is known)",
    "nvlink_crc_errors_per_min": "CRC errors per link counter per minute since the last check (a ceiling)",
    "nvlink_replay_errors_per_min": "replay/recovery errors per link counter per minute since the last check "
                                    "(a ceiling)",
    "ib_port_rate_gbps": "Gb/s rate of each InfiniBand/RoCE port",
    "ib_port_error_count": "per-port error counter since driver load (symbol, link downed, receive errors...; a "
                           "ceiling; judged when no earlier reading is known)",
    "ib_port_errors_per_min": "per-port error counter (symbol, receive errors, link recovery...) per minute since "
                              "the last check (a ceiling)",
    "ib_link_downed_per_min": "per-port link flaps (link_downed) per minute since the last check (a ceiling)",
}
CEILING_KEYS = {"rdma_lat_us", "nvlink_error_count", "ib_port_error_count", "nvlink_crc_errors_per_min",
                "nvlink_replay_errors_per_min", "ib_port_errors_per_min", "ib_link_downed_per_min"}
REQUIRED = ("name", "description", "gpu_count", "nvls_expected", "thresholds", "sources")


class ProfileError(ValueError):
    """A profile file is missing or malformed; the message names the file and the key."""


def list_profiles() -> list:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name: str) -> dict:
    path = PROFILE_DIR / f"{name}.json"
    if not path.is_file():
        raise ProfileError(f"no hardware profile {name!r}; known: {', '.join(list_profiles())}")
    from verify.bounded_load import BoundedLoadError, load_json_bounded

    try:
        data = load_json_bounded(str(path), max_bytes=1 << 20, what="profile")
    except BoundedLoadError as exc:
        raise ProfileError(str(exc)) from None
    return validate_profile(data, path.name)


def validate_profile(data: Any, origin: str) -> dict:
    if not isinstance(data, dict):
        raise ProfileError(f"profile {origin}: top level must be a mapping")
    for key in REQUIRED:
        if key not in data:
            raise ProfileError(f"profile {origin}: missing key {key!r}")
    if not isinstance(data["thresholds"], dict):
        raise ProfileError(f"profile {origin}: 'thresholds' must be a mapping")
    for key, entry in data["thresholds"].items():
        if key not in KEYS:
            raise ProfileError(f"profile {origin}: unknown threshold {key!r}; known: {', '.join(sorted(KEYS))}")
        # A profile's threshold must cite its source, so it is a mapping, never a bare number
        # (verify_thresholds may use a bare number: the operator is the source there).
        if not isinstance(entry, dict):
            raise ProfileError(f"profile {origin}: threshold {key!r} must be a mapping like "
                               f"{{\"min\": 300, \"source\": \"...\"}}, got {entry!r:.60}")
        _threshold_from_entry(key, entry, f"profile {origin}")
        if not str(entry.get("source", "")).strip():
            raise ProfileError(f"profile {origin}: threshold {key!r} has no source")
    for key in ("sources", "bench", "match"):
        if key in data and not isinstance(data[key], dict):
            raise ProfileError(f"profile {origin}: {key!r} must be a mapping")
    for key in ("gpu_count", "nvls_expected"):
        if not str(data["sources"].get(key, "")).strip():
            raise ProfileError(f"profile {origin}: no source for {key!r}")
    if "vars" in data and not isinstance(data["vars"], dict):
        raise ProfileError(f"profile {origin}: 'vars' must be a mapping of role variables")
    _check_topology(data, origin)
    return data


TOPOLOGY_WANTS = ("pcie_switch", "numa", None)


def _check_topology(data: dict, origin: str) -> None:
    """"topology": {"gpu_hca_same": "pcie_switch" | "numa" | null} (verify/checks/health_topology.py),
    with a source when it asks for anything."""
    block = data.get("topology")
    if block is None:
        return
    if not isinstance(block, dict) or set(block) - {"gpu_hca_same"}:
        raise ProfileError(f"profile {origin}: 'topology' must be a mapping with only 'gpu_hca_same', "
                           f"got {block!r:.80}")
    wanted = block.get("gpu_hca_same")
    if wanted not in TOPOLOGY_WANTS:
        raise ProfileError(f"profile {origin}: topology.gpu_hca_same {wanted!r:.40} must be "
                           "'pcie_switch', 'numa' or null")
    if wanted and not str(data["sources"].get("topology", "")).strip():
        raise ProfileError(f"profile {origin}: no source for 'topology'")


def _limit(value: Any, key: str, name: str, origin: str) -> float:
    """A limit is a finite number above zero: NaN, infinity, zero or below would judge garbage as PASS.
    A ceiling may be zero ("no errors at all"): nothing passes under it by accident."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{origin}: threshold {key!r} {name!r} must be a number, got {value!r:.60}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    floor = key not in CEILING_KEYS
    if not math.isfinite(number) or number < 0 or (floor and number == 0):
        raise ProfileError(f"{origin}: threshold {key!r} {name!r} must be a finite number "
                           f"{'above zero' if floor else 'at or above zero'}, "
                           f"got {value!r:.60}")
    return number


def threshold_from_entry(key: str, entry: Any, origin: str) -> Threshold:
    """One threshold entry: a mapping {min|max, warn, source}, or a bare number meaning {min|max: N}."""
    kind = "max" if key in CEILING_KEYS else "min"
    if isinstance(entry, bool) or not isinstance(entry, (int, float, dict)):
        raise ProfileError(f"{origin}: threshold {key!r} must be a number or a mapping, got {entry!r:.60}")
    if isinstance(entry, (int, float)):
        return Threshold(limit=_limit(entry, key, kind, origin), kind=kind, source=f"{origin} (override)")
    if kind not in entry:
        raise ProfileError(f"{origin}: threshold {key!r} needs a numeric {kind!r}")
    limit = _limit(entry[kind], key, kind, origin)
    warn = entry.get("warn")
    return Threshold(
        limit=limit,
        warn=None if warn is None else _limit(warn, key, "warn", origin),
        kind=kind,
        source=str(entry.get("source", origin)),
    )


_threshold_from_entry = threshold_from_entry


def resolve_threshold(
    key: str, profile: Optional[dict], spec: Optional[dict], derived: Optional[Threshold] = None
) -> Optional[Threshold]:
    """verify_thresholds from the desired state win, then the profile, then what was derived."""
    if key not in KEYS:
        raise ProfileError(f"unknown threshold key {key!r}")
    overrides = ((spec or {}).get("verify") or {}).get("thresholds") or {}
    if key in overrides:
        return _threshold_from_entry(key, overrides[key], "verify_thresholds")
    entry = ((profile or {}).get("thresholds") or {}).get(key)
    if entry is not None:
        return _threshold_from_entry(key, entry, f"profile {(profile or {}).get('name', '?')}")
    return derived


def pick_profile(facts: Optional[dict], by_model: bool = False) -> Optional[dict]:
    """`verify_profile: auto`: the shipped profile whose `match` fits this node's GPUs, or None.

    `facts["gpus"]["gpus"]` is the inventory verify gathers (name and memory.total per GPU). With
    `by_model`, a node whose GPUs are all one model of the GPU model table gets that model's profile for
    any GPU count (verify/profiles/by_model.py): a shipped profile that fits still wins, and takes the
    model's floors for the keys it does not set; the profile's `auto_how` says where its floors come from.
    Without a match the benchmarks fall back to thresholds derived from the node itself.
    """
    gpus = (((facts or {}).get("gpus") or {}).get("gpus")) or []
    gpus = [g for g in gpus if isinstance(g, dict)]
    names = [str(g.get("name", "")) for g in gpus]
    if not names:
        return None
    shipped = None
    for name in list_profiles():
        profile = load_profile(name)
        match = profile.get("match") or {}
        wanted = match.get("gpu_name_contains") or []
        unwanted = match.get("gpu_name_excludes") or []
        if match.get("gpu_count") != len(names):
            continue
        if all(any(w in n for w in wanted) and not any(u in n for u in unwanted) for n in names):
            shipped = profile
            break
    if not by_model:
        return shipped
    model = by_model_profiles.node_model(gpus)
    if model is None:
        return shipped
    derived = validate_profile(by_model_profiles.model_profile(model, len(names), tuple(names)),
                               f"model {model.key}")
    return derived if shipped is None else by_model_profiles.merged(shipped, derived)


def bench_setting(name: str, profile: Optional[dict], default: Any) -> Any:
    """Benchmark settings (sizes, tries) a profile may tune for its hardware class."""
    return ((profile or {}).get("bench") or {}).get(name, default)


def main(args) -> int:
    """`tunefleet profiles`: one row per shipped profile, in columns of the width their widest cell needs."""
    rows = [("PROFILE", "GPUS", "NVLS", "ALL-REDUCE BUSBW FLOOR", "DESCRIPTION")]
    for name in list_profiles():
        try:
            profile = load_profile(name)
        except ProfileError as exc:
            rows.append((name, "-", "-", "INVALID", str(exc)))
            continue
        busbw = (profile["thresholds"].get("nccl_allreduce_busbw_gbps") or {}).get("min")
        rows.append((name, str(profile["gpu_count"]), "on" if profile["nvls_expected"] else "off",
                     f">= {busbw:g} GB/s" if busbw is not None else "derived", str(profile["description"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return 0
