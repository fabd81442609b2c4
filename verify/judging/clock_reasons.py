"""NVML's clocks event reasons (formerly "throttle reasons") and which of them mean a problem: the one home
for the bits and their meaning, read by the health check (verify.checks.health_gpu), the scheduler's NVML
reading (verify.scheduler.nvml) and the benchmarks' NVML samples (verify.bench.gpu_clocks).

Source: NVIDIA NVML API Reference, "NvmlClocksEventReasons"
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html), the same bits in every driver
and in `nvidia-smi --query-gpu=clocks_event_reasons.*` (older name `clocks_throttle_reasons.*`).
- A problem: HW Slowdown ("reducing the core clocks by a factor of 2 or more": temperature too high, an
  external power brake asserted, power draw too high for the fast-trigger protection), HW Thermal
  Slowdown, HW Power Brake Slowdown (both "reducing the core clocks by a factor of 2 or more"), and SW
  Thermal Slowdown (the driver lowering clocks because the GPU is too hot).
- Not a problem: SW Power Cap ("the clocks have been optimized to ensure not to exceed currently set power
  limits"): a GPU running a job at its power limit, its normal state under load (a healthy H100 and two
  H200s sat at it throughout a burn: tests/fixtures/bench/gpu_burn_*.stdout); GPU idle, application
  clocks, sync boost and display clock settings are not slowdowns at all.
"""
from __future__ import annotations

# nvml.h nvmlClocksEventReason* bit -> the name nvidia-smi gives it in --query-gpu
REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# The reasons that mean a problem, judged at rest (health) and under load (benchmarks), with the words a
# person reads.
PROBLEM = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
LABELS = {"hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
          "hw_power_brake_slowdown": "HW power brake slowdown", "sw_thermal_slowdown": "SW thermal slowdown",
          "sw_power_cap": "at its power limit (SW power cap)"}
# Working at the power limit the operator set: shown next to a reading, never a verdict by itself.
AT_POWER_LIMIT = ("sw_power_cap",)
# Not throttling at all: nothing to run (idle), clocks pinned by the operator, clocks synced across GPUs.
BENIGN = ("gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting")
# The prefix nvidia-smi's --query-gpu uses for each reason's Active / Not Active field (the older name,
# which every driver still answers).
SMI_FIELD_PREFIX = "clocks_throttle_reasons."


def smi_field(name: str) -> str:
    return SMI_FIELD_PREFIX + name
