"""The node report as a node_exporter textfile-collector file (exposition format 0.0.4): statuses and figures.

Statuses:
- tunefleet_check_status{check,role,status} is a state set: 1 for the result's status, 0 for the other four,
  so `== 1` selects the current state and alerts can match status="FAIL".
- tunefleet_check_ok{check,role} is 1 for PASS/WARN/SKIP, 0 for FAIL/ERROR.

Figures, every measured one as a gauge in base units (Prometheus naming: bytes per second, seconds, flops,
celsius, watts), labelled with the check and, where they apply, gpu (index), uuid, pci_bus_id, hca, port:
- benchmark figures by unit (tunefleet_bandwidth_bytes_per_second, tunefleet_compute_flops,
  tunefleet_latency_seconds, ...) with their floor and physical peak as their own gauges
  (tunefleet_bandwidth_floor_bytes_per_second, tunefleet_bandwidth_peak_bytes_per_second, ...);
- the GPU readings of the health checks (temperature, T.Limit headroom and its floor, power, power limit,
  uncorrectable ECC errors), IB port rates and error counters, NVLink link rates and error counters.
tunefleet_last_run_timestamp_seconds{mode} says when the node was last checked. A scheduler mode
(`tunefleet check --mode`) labels every series with its mode, so its file and verify's can sit in one
textfile directory without duplicate series.
"""
from __future__ import annotations

import datetime
import re
from typing import Optional

from verify.bounded_load import finite_number
from verify.report import results_of, section, summary_of
from verify.result import CheckResult, Status

OK_STATUSES = (Status.PASS, Status.WARN, Status.SKIP)
# figure unit -> (metric family stem, base unit suffix, factor to the base unit)
UNITS = {
    "GB/s": ("bandwidth", "bytes_per_second", 1e9), "GiB/s": ("bandwidth", "bytes_per_second", float(1 << 30)),
    "MB/s": ("bandwidth", "bytes_per_second", 1e6), "Gb/s": ("bandwidth", "bytes_per_second", 1e9 / 8),
    "Gbps": ("bandwidth", "bytes_per_second", 1e9 / 8),
    "TFLOPS": ("compute", "flops", 1e12), "TFLOP/s": ("compute", "flops", 1e12), "GFLOPS": ("compute", "flops", 1e9),
    "us": ("latency", "seconds", 1e-6), "ms": ("latency", "seconds", 1e-3), "s": ("duration", "seconds", 1.0),
    "W": ("power", "watts", 1.0), "C": ("temperature", "celsius", 1.0),
}
UNIT_BY_PREFIX = (("bench.nccl", "GB/s"), ("bench.h2d.", "GB/s"), ("bench.d2h.", "GB/s"), ("bench.storage", "GB/s"),
                  ("bench.rdma", "Gb/s"))
# health.gpu.clocks readings -> (metric, help)
GPU_READINGS = (
    ("temperature_c", "tunefleet_gpu_temperature_celsius", "GPU core temperature."),
    ("memory_temperature_c", "tunefleet_gpu_memory_temperature_celsius", "GPU memory (HBM) temperature."),
    ("tlimit_headroom_c", "tunefleet_gpu_tlimit_headroom_celsius", "Degrees below the GPU's slowdown limit (T.Limit)."),
    ("power_w", "tunefleet_gpu_power_watts", "GPU power draw."),
    ("power_limit_w", "tunefleet_gpu_power_limit_watts", "GPU enforced power limit."),
)
_GPU_INDEX = re.compile(r"(?:\.gpu|^health\.gpu\.[a-z_]+\.|^health\.nvlink\.)(\d+)$")


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{escape(str(v))}"' for k, v in labels.items() if v is not None and v != "") + "}"


def _timestamp(iso: object) -> float:
    """Unix time of the report's generated_at; 0 (the epoch: obviously stale) when it is absent or not a time."""
    try:
        return datetime.datetime.fromisoformat(iso).timestamp() if isinstance(iso, str) else 0.0
    except (ValueError, OverflowError, OSError):
        return 0.0


def _number(value: object) -> Optional[float]:
    """A figure as a finite float; a reading printed with its unit ("127.00 W") counts by its number."""
    if isinstance(value, str):
        try:
            value = float(value.split()[0]) if value.strip() else None
        except ValueError:
            return None
    return finite_number(value)


def _short_bus(bus: object) -> str:
    """'00000000:3B:00.0' or '0000:3b:00.0' -> '0000:3b:00.0' (one spelling for the label)."""
    text = str(bus or "").strip().lower()
    return text[-12:] if re.search(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", text) else text


class _Families:
    """Gauge families in first-seen order; a repeated series (same name and labels) keeps its first value."""

    def __init__(self, extra: dict):
        self.extra = extra
        self.help: dict = {}
        self.samples: dict = {}

    def add(self, name: str, help_text: str, labels: dict, value: Optional[float]) -> None:
        if value is None:
            return
        self.help.setdefault(name, help_text)
        series = self.samples.setdefault(name, {})
        key = _labels(**labels, **self.extra)
        series.setdefault(key, value)

    def lines(self) -> list:
        out = []
        for name, series in self.samples.items():
            out += [f"# HELP {name} {self.help[name]}", f"# TYPE {name} gauge"]
            out += [f"{name}{key} {_format(value)}" for key, value in series.items()]
        return out


def _format(value: float) -> str:
    return repr(float(value)) if value != int(value) or abs(value) >= 1e15 else str(int(value))


class _Gpus:
    """gpu index, PCI bus id and UUID labels of one report's GPUs (facts, and a scheduler run's NVML UUIDs)."""

    def __init__(self, report: dict):
        gpus = section(report, "facts", "gpus").get("gpus")
        self.bus_of = {}
        for gpu in gpus if isinstance(gpus, list) else []:
            if isinstance(gpu, dict) and isinstance(gpu.get("index"), int):
                self.bus_of[gpu["index"]] = _short_bus(gpu.get("bus_id"))
        uuids = section(report, "run").get("gpu_uuids")
        self.uuid_of = {_short_bus(k): str(v) for k, v in uuids.items()} if isinstance(uuids, dict) else {}

    def labels(self, result: CheckResult, index: Optional[int] = None) -> dict:
        if index is None:
            match = _GPU_INDEX.search(result.check_id)
            index = int(match.group(1)) if match else None
            if index is None and isinstance(result.details.get("gpu"), int):
                index = result.details["gpu"]
        bus = _short_bus(result.details.get("bus_id")) or self.bus_of.get(index, "")
        return {"gpu": "" if index is None else str(index), "uuid": self.uuid_of.get(bus, ""), "pci_bus_id": bus}


def _unit_of(result: CheckResult) -> str:
    unit = result.details.get("unit")
    if isinstance(unit, str) and unit:
        return unit
    return next((u for prefix, u in UNIT_BY_PREFIX if result.check_id.startswith(prefix)), "")


def _bench_figures(result: CheckResult, families: _Families, gpus: _Gpus) -> None:
    if not result.check_id.startswith("bench.") or result.status is Status.ERROR:
        return
    unit = UNITS.get(_unit_of(result))
    value = _number(result.details.get("value", result.observed))
    if unit is None or value is None:
        return
    stem, base, factor = unit
    labels = dict(check=result.check_id, **gpus.labels(result))
    families.add(f"tunefleet_{stem}_{base}", f"A measured {stem} figure in {base.replace('_', ' ')}.",
                 labels, value * factor)
    threshold = result.details.get("threshold")
    if isinstance(threshold, dict) and threshold.get("kind", "min") == "min":
        floor = _number(threshold.get("limit"))
        if floor is not None and floor > 1e-6:  # 1e-9: "no floor, only the physical bound"
            families.add(f"tunefleet_{stem}_floor_{base}", f"The floor the {stem} figure is judged against.",
                         labels, floor * factor)
    peak = result.details.get("physical_peak")
    if isinstance(peak, dict) and peak.get("fallback") is True:
        return  # the fastest link there is, used because this node's could not be read: not its peak
    peak = _number(peak.get("gbps", peak.get("value"))) if isinstance(peak, dict) else _number(peak)
    if peak is not None:
        families.add(f"tunefleet_{stem}_peak_{base}", f"The physical peak of the {stem} figure.", labels, peak * factor)


def _health_figures(result: CheckResult, families: _Families, gpus: _Gpus) -> None:
    details, check = result.details, result.check_id
    if check.startswith("health.gpu.clocks.") and isinstance(details.get("readings"), dict):
        labels = dict(check=check, **gpus.labels(result))
        for key, name, help_text in GPU_READINGS:
            families.add(name, help_text, labels, _number(details["readings"].get(key)))
        threshold = details.get("threshold")
        if isinstance(threshold, dict):
            families.add("tunefleet_gpu_tlimit_headroom_floor_celsius",
                         "The T.Limit headroom below which the GPU FAILs.", labels, _number(threshold.get("limit")))
    elif check.startswith("health.gpu.memory.") and isinstance(details.get("readings"), dict):
        labels = dict(check=check, **gpus.labels(result))
        for scope in ("volatile", "aggregate"):
            families.add("tunefleet_gpu_ecc_uncorrected_errors",
                         "Uncorrectable ECC errors (volatile: since the driver loaded; aggregate: lifetime).",
                         dict(labels, scope=scope),
                         _number(details["readings"].get(f"ecc.errors.uncorrected.{scope}.total")))
    elif check.startswith("health.ib.") and "port" in details:
        hca, _, port = str(details["port"]).partition("/")
        labels = {"check": check, "hca": hca, "port": port}
        rate = _number(details.get("rate_gbps"))
        families.add("tunefleet_ib_port_rate_bytes_per_second", "IB/RoCE port link rate.",
                     labels, None if rate is None else rate * 1e9 / 8)
        for counter, count in sorted((details.get("counters") or {}).items()):
            families.add("tunefleet_ib_port_errors", "IB/RoCE port error counter (since the driver loaded).",
                         dict(labels, counter=counter), _number(count))
    elif check.startswith("health.nvlink.") and isinstance(details.get("links_gbps"), dict):
        base = dict(check=check, **gpus.labels(result))
        for link, gbps in sorted(details["links_gbps"].items()):
            rate = _number(gbps)
            families.add("tunefleet_nvlink_link_rate_bytes_per_second", "NVLink link rate per direction.",
                         dict(base, link=str(link)), None if rate is None else rate * 1e9)
        for link, named in sorted((details.get("errors") or {}).items()):
            for counter, count in sorted((named or {}).items() if isinstance(named, dict) else []):
                families.add("tunefleet_nvlink_errors", "NVLink error counter (since the driver loaded).",
                             dict(base, link=str(link), counter=str(counter)), _number(count))


def render(report: dict, mode: str = "") -> str:
    extra = {"mode": mode} if mode else {}
    tag = _labels(**extra)
    results = results_of(report)
    lines = [
        "# HELP tunefleet_check_status Result of a tunefleet check: 1 for its current status, 0 otherwise.",
        "# TYPE tunefleet_check_status gauge",
    ]
    seen = set()
    unique = []
    for r in results:  # a repeated check id would be a duplicate series: keep the first
        if r.check_id not in seen:
            seen.add(r.check_id)
            unique.append(r)
    for r in unique:
        for status in Status:
            value = 1 if r.status is status else 0
            labels = _labels(check=r.check_id, role=r.role, status=status.value, **extra)
            lines.append(f"tunefleet_check_status{labels} {value}")
    lines += [
        "# HELP tunefleet_check_ok 1 when the check passed, warned or was skipped; 0 when it failed or errored.",
        "# TYPE tunefleet_check_ok gauge",
    ]
    for r in unique:
        ok = int(r.status in OK_STATUSES)
        lines.append(f"tunefleet_check_ok{_labels(check=r.check_id, role=r.role, **extra)} {ok}")
    families, gpus = _Families(extra), _Gpus(report)
    for r in unique:
        _bench_figures(r, families, gpus)
        _health_figures(r, families, gpus)
    lines += families.lines()
    run = section(report, "run")
    stamp = _timestamp(report.get("generated_at"))
    lines += [
        "# HELP tunefleet_last_run_timestamp_seconds When tunefleet last checked this node (Unix time), per mode.",
        "# TYPE tunefleet_last_run_timestamp_seconds gauge",
        f"tunefleet_last_run_timestamp_seconds{_labels(mode=mode or 'verify')} {stamp:.0f}",
    ]
    if mode:
        lines += [
            "# HELP tunefleet_check_duration_seconds How long the last scheduler-mode check took.",
            "# TYPE tunefleet_check_duration_seconds gauge",
            f"tunefleet_check_duration_seconds{tag} {finite_number(run.get('duration_s')) or 0:.6f}",
            "# HELP tunefleet_check_exit_code Exit code of the last scheduler-mode check.",
            "# TYPE tunefleet_check_exit_code gauge",
            f"tunefleet_check_exit_code{tag} {summary_of(report)[1]}",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        "# HELP tunefleet_verify_last_run_timestamp_seconds When this node was last verified (Unix time).",
        "# TYPE tunefleet_verify_last_run_timestamp_seconds gauge",
        f"tunefleet_verify_last_run_timestamp_seconds {stamp:.0f}",
        "# HELP tunefleet_verify_duration_seconds How long the last verify run took.",
        "# TYPE tunefleet_verify_duration_seconds gauge",
        f"tunefleet_verify_duration_seconds {finite_number(run.get('duration_s')) or 0:.6f}",
        "# HELP tunefleet_verify_exit_code Exit code of the last run: 0 ok, 1 failed, 3 could not check (ERROR).",
        "# TYPE tunefleet_verify_exit_code gauge",
        f"tunefleet_verify_exit_code {summary_of(report)[1]}",
    ]
    return "\n".join(lines) + "\n"
