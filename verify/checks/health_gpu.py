"""GPU health from one nvidia-smi query: presence against the expected count, memory errors, clocks.

Judges are pure functions of the parsed readings (health_smi.GpuHealth); `run_*` only gather.
"""
from __future__ import annotations

from typing import Optional

from verify.checks.common import error, result, skip
from verify.checks.health_common import CHECK_COOLING, PREVIOUS_COUNTERS, REBOOT, RESEAT, ROLE, profile, threshold
from verify.facts import health_smi, smi_failure
from verify.facts.pci import driver_reason, nvidia_gpus_on_bus, short_bdf
from verify.judging import clock_reasons, verdicts
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.result import Status

# Idle H200s read 52-59 C of T.Limit headroom and 35 C under full load (the 2x H200 capture and the
# public H200 capture in tests/fixtures/node/health/README.md); slowdown starts near -2 C.
DERIVED_TEMP_MARGIN = Threshold(limit=5, warn=10, kind="min", source=(
    "derived: HW slowdown starts at 'GPU Slowdown T.Limit Temp' (-2 C on H200, nvidia-smi -q); "
    "under 5 C of headroom the GPU is about to slow down, under 10 C it runs hot"))
_WORST = {Status.FAIL: 3, Status.WARN: 2, Status.PASS: 1}


def _worst(findings: list) -> Status:
    return max((status for status, _, _ in findings), key=_WORST.get, default=Status.PASS)


# A clocks finding's status -> its class: a slowdown the hardware forced or a GPU at its thermal limit needs the
# node out and its cooling or power feed serviced (hardware service: drain-rma); a warning is watched.
_CLOCKS_ACTION = {Status.FAIL: verdicts.DRAIN_RMA, Status.WARN: verdicts.WATCH, Status.PASS: verdicts.OK}


def _verdict(check_id: str, gpu, findings: list, passed: str, details: dict):
    """One result per GPU: the worst finding sets the status and the action class, every finding is in the
    reason."""
    status = _worst(findings)
    if status is Status.PASS:
        return result(check_id, ROLE, Status.PASS, "healthy", passed, details=details)
    details = dict(details, **{verdicts.ACTION_KEY: _CLOCKS_ACTION[status]})
    bad = [f for f in findings if f[0] is status]
    reason = f"{gpu.label}: " + "; ".join(text for _, text, _ in findings)
    return result(check_id, ROLE, status, "healthy", "; ".join(text for _, text, _ in bad), reason,
                  details=details, fix=bad[0][2].format(index=gpu.index, what=gpu.label))


# ---- presence ----------------------------------------------------------------------------------------

def _answer_findings(failures, gpus, on_bus: list, want) -> list:
    """(action, text) for what nvidia-smi said of the GPUs: its failure forms (verify.facts.smi_failure, each
    with its class) and the GPUs whose readings it printed as errors (ERR!, Unknown Error, GPU is lost)."""
    findings = []
    for failure in failures:
        if failure.action is None or failure.needs_gpus_on_bus and not on_bus and not want:
            continue  # could not check (said apart), or "no GPU" where the bus shows none: nothing is lost
        findings.append((failure.action, failure.said()))
    for gpu in gpus:
        errors = gpu.errors()
        if not errors:
            continue
        printed = ", ".join(f"{name} {error!r}" for name, error in sorted(errors.items()))
        if set(errors.values()) & set(smi_failure.GPU_GONE_VALUES):
            findings.append((verdicts.REBOOT, f"{gpu.label} is unusable until reset or reboot ({printed})"))
        elif not gpu.answers():
            findings.append((verdicts.REBOOT, f"{gpu.label} answers no reading ({printed}): the driver cannot "
                                              "reach it"))
        else:
            # one reading printed ERR! while the rest read (Azure/azhpc-diagnostics#77: power ERR! passed)
            findings.append((verdicts.WATCH, f"{gpu.label}: nvidia-smi could not read {printed}; the GPU answers "
                                             "its other readings"))
    return findings


def judge_presence(on_bus: list, listed, expected, reason: str, failures=(), gpus=(), unreadable: str = ""):
    """on_bus: sysfs addresses of NVIDIA GPUs; listed: the driver's bus ids (None: not readable); failures:
    nvidia-smi's failure forms seen; gpus: the readings (their ERR! fields); unreadable: an output present but
    not readable ("could not read ...": ERROR, unless a fault was found anyway)."""
    check_id = "health.gpu.presence"
    details = {"on_pci_bus": on_bus, "driver_lists": listed, "expected_source": getattr(expected, "source", None)}
    want = int(expected.limit) if expected else None
    findings = _answer_findings(failures, gpus, on_bus, want)
    if listed is not None and not unreadable:  # a cut paste does not list what it cut: that GPU is not lost
        lost = sorted(set(on_bus) - set(listed))
        if lost:
            findings.insert(0, (verdicts.REBOOT, f"GPU(s) at {', '.join(lost)} on the PCI bus but not listed by the "
                                                 "driver (fell off the bus or failed to initialise; see the Xid "
                                                 "check)"))
    count, seen = (len(on_bus), "on the PCI bus") if listed is None else (len(listed), "listed by the driver")
    if want is not None and count < want and not unreadable:
        findings.append((verdicts.DRAIN_RMA, f"{count} of {want} expected GPUs {seen}"))
    action = verdicts.worst(a for a, _ in findings)
    if verdicts.status_of(action) is Status.FAIL:
        bad = [text for a, text in findings if a == action]
        fix = RESEAT.format(what="the missing GPU(s)") if action == verdicts.DRAIN_RMA else \
            REBOOT + "; " + RESEAT.format(what=", ".join(sorted(set(on_bus) - set(listed or on_bus))) or "the GPU")
        return result(check_id, ROLE, Status.FAIL, want or len(on_bus), count, "; ".join(bad),
                      details=dict(details, **{verdicts.ACTION_KEY: action, "findings": [t for _, t in findings]}),
                      fix=fix)
    if unreadable:
        return error(check_id, ROLE, unreadable, want or len(on_bus) or None)
    if listed is None and not on_bus and want is None:
        return skip(check_id, ROLE, f"no NVIDIA GPU on the PCI bus and no expected count ({reason})")
    if listed is None and on_bus:
        return result(check_id, ROLE, Status.WARN, want or len(on_bus), count,
                      f"{count} GPU(s) {seen}, their driver state unreadable: {reason}",
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.WATCH}),
                      fix="load the NVIDIA driver (or run verify on the live node) to judge the GPUs")
    if findings:
        return result(check_id, ROLE, Status.WARN, want or count, count, "; ".join(t for _, t in findings),
                      details=dict(details, **{verdicts.ACTION_KEY: action}),
                      fix=verdicts.remedy(action, "", "the GPU"))
    if want is not None and count > want:
        return result(check_id, ROLE, Status.WARN, want, count, f"{count} GPUs {seen}, the profile expects {want}",
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.WATCH}),
                      fix="check the node's hardware profile (verify_profile / gpu_count)")
    return result(check_id, ROLE, Status.PASS, want or count, count, f"{count} GPU(s) {seen}", details=details)


def run_presence(spec: dict, node: Node) -> list:
    on_bus = [short_bdf(address) for address in nvidia_gpus_on_bus(node)]
    chosen = profile(spec, node)
    derived = Threshold(limit=chosen["gpu_count"], source=f"profile {chosen['name']} gpu_count") if chosen else None
    expected = threshold("gpu_count", spec, node, derived)
    reason = driver_reason(node)
    if reason:
        return [judge_presence(on_bus, None, expected, reason)]
    found = health_smi.reading(node)
    listed = [short_bdf(gpu.bus_id) for gpu in found.gpus] if found.gpus or not (found.why() or found.failures) \
        else None
    could_not = [f.said() for f in found.failures if f.action is None]
    unreadable = found.unreadable or (f"could not check: nvidia-smi: {'; '.join(could_not)}"
                                      if could_not and not found.gpus else "")
    if listed is None and on_bus and not found.failures and not unreadable:
        return [result("health.gpu.presence", ROLE, Status.FAIL, len(on_bus), 0,
                       f"{len(on_bus)} GPU(s) on the PCI bus but the driver answers nothing: {found.why()}",
                       details={"on_pci_bus": on_bus, verdicts.ACTION_KEY: verdicts.REBOOT}, fix=REBOOT)]
    return [judge_presence(on_bus, listed, expected, found.why(), found.failures, found.gpus, unreadable)]


# ---- memory errors ---------------------------------------------------------------------------------

def _split_ecc_findings(gpu) -> Optional[list]:
    """SRAM and DRAM uncorrectable errors judged apart, each with its lifetime count; None when the driver
    reports only the total.

    NVIDIA GPU Memory Error Management (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): a DRAM
    (HBM) uncorrectable error sends its row to the remapper, applied at the next GPU reset. SRAM (caches,
    register files) has no rows to remap: the driver contains the error (Xid 94, or 95 when it cannot) and a
    GPU reset clears it; the SRAM lifetime count is what NVIDIA's field diagnostic threshold is judged on
    (NVML nvmlEccSramErrorStatus_v1_t.bThresholdExceeded, "the error threshold of field diag is exceeded";
    DCGM's software plugin checkForSramThreshold reports it). Both: reset-gpu when counted since the driver
    loaded, watch when only the lifetime count holds any; the SRAM Threshold Exceeded flag (from `nvidia-smi
    -q`) is NVIDIA's RMA criterion for SRAM ("GPU L2 Memory RMA Policy"): drain-rma."""
    counts = {name: gpu.number(name) for name in health_smi.SPLIT_ECC_FIELDS}
    if all(value is None for value in counts.values()) and gpu.active(health_smi.SRAM_THRESHOLD) is None:
        return None
    findings = []
    if gpu.active(health_smi.SRAM_THRESHOLD):
        # NVIDIA GPU Memory Error Management, "RMA Policy" / "GPU L2 Memory RMA Policy": the RMA criterion for
        # SRAM uncorrectable errors is the SRAM Threshold Exceeded flag (more than 4 unique parity / 2 unique
        # SEC-DED errors in an address bank)
        findings.append((verdicts.DRAIN_RMA, "SRAM Threshold Exceeded (NVIDIA's RMA criterion for SRAM)", None))
    for part, mechanism in (("DRAM", "its row is remapped at the next GPU reset"),
                            ("SRAM", "SRAM has no rows to remap: a GPU reset clears the contained error; RMA "
                                     "when NVIDIA's SRAM threshold is exceeded")):
        since_load = counts[f"ecc.errors.uncorrected.volatile.{part.lower()}"]
        lifetime = counts[f"ecc.errors.uncorrected.aggregate.{part.lower()}"]
        life = f" ({lifetime:.0f} in the GPU's lifetime)" if lifetime is not None else ""
        if since_load:
            findings.append((verdicts.RESET_GPU,
                             f"{since_load:.0f} uncorrectable {part} ECC error(s) since the driver loaded{life}: "
                             f"{mechanism}", None))
        elif lifetime:
            findings.append((verdicts.WATCH, f"{lifetime:.0f} uncorrectable {part} ECC error(s) in the GPU's "
                                             "lifetime, none since the driver loaded", None))
    return findings


def judge_memory(gpu, previous: Optional[dict] = None):
    """NVIDIA GPU Memory Error Management (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/):
    a pending row remap is applied at the next GPU reset and "unaffected applications can continue running
    ... and new workloads can be launched" ("Error Recovery and Response Flags"): reset-gpu, whether the
    rows were remapped for correctable or uncorrectable errors (the manual draws no line there). The RMA
    criterion is the row-remapping failure flag ("RMA Policy"): drain-rma. SRAM and DRAM uncorrectable
    errors are judged apart where the driver reports them apart (_split_ecc_findings).

    `previous`: the last run's numeric readings of this GPU (the history's counters): the uncorrectable
    errors are then said as the increase since that run, with the count since the driver loaded beside it."""
    findings = []  # (action class, what was seen, remediation or None for the class's words)
    volatile = gpu.number("ecc.errors.uncorrected.volatile.total")
    aggregate = gpu.number("ecc.errors.uncorrected.aggregate.total")
    uncorrectable_rows = gpu.number("remapped_rows.uncorrectable")
    before = (previous or {}).get("ecc.errors.uncorrected.volatile.total")
    split = _split_ecc_findings(gpu)
    findings += split or []
    apart = sum(gpu.number(f"ecc.errors.uncorrected.volatile.{part}") or 0 for part in ("sram", "dram"))
    if volatile and volatile > apart:  # the total holds errors the split counters do not place
        # contained by the GPU; its row goes to the remapper, applied at the next reset (a reset clears the count)
        if isinstance(before, int) and 0 <= before <= volatile:
            new = volatile - before
            said = (f"{new:.0f} uncorrectable ECC error(s) since the last run ({volatile:.0f} since the driver loaded)"
                    if new else f"no new uncorrectable ECC error since the last run ({volatile:.0f} since the driver "
                                "loaded: not reset yet)")
        else:
            said = f"{volatile:.0f} uncorrectable ECC error(s) since the driver loaded"
        if aggregate is not None:
            said += f" ({aggregate:.0f} in the GPU's lifetime)"
        findings.append((verdicts.RESET_GPU, said, None))
    if gpu.active("remapped_rows.failure"):
        findings.append((verdicts.DRAIN_RMA, "row remapping failed (NVIDIA's RMA criterion for GPU memory)", None))
    if gpu.active("remapped_rows.pending"):
        rows = (f"{uncorrectable_rows:.0f} row(s) remapped for uncorrectable errors" if uncorrectable_rows
                else "correctable-error rows only")
        findings.append((verdicts.RESET_GPU, f"row remapping pending ({rows}): applied at the next GPU reset", None))
    if gpu.active("retired_pages.pending"):
        findings.append((verdicts.RESET_GPU, "page retirement pending (applied at the next GPU reset or driver load)",
                         None))
    apart_lifetime = sum(gpu.number(f"ecc.errors.uncorrected.aggregate.{part}") or 0 for part in ("sram", "dram"))
    if aggregate and not volatile and aggregate > apart_lifetime:
        findings.append((verdicts.WATCH, f"{aggregate:.0f} uncorrectable ECC error(s) in the GPU's lifetime", None))
    if gpu.active("ecc.mode.current") is False:
        findings.append((verdicts.WATCH, "ECC is disabled: memory errors go undetected",
                         "enable ECC (nvidia-smi -e 1 -i {index}) and reboot"))
    readings = {name: gpu.text(name) for name in health_smi.MEMORY_FIELDS if name in gpu.fields}  # those asked
    check_id = f"health.gpu.memory.{gpu.index}"
    if all(value is None for value in readings.values()):
        return skip(check_id, ROLE, f"{gpu.label} reports no ECC or remapping state")
    details = {"bus_id": gpu.bus_id, "readings": readings}
    action = verdicts.worst(a for a, _, _ in findings)
    status = verdicts.status_of(action)
    if status is Status.PASS:
        return result(check_id, ROLE, status, "healthy", "no uncorrectable error, nothing pending", details=details)
    details[verdicts.ACTION_KEY] = action
    worst = [f for f in findings if f[0] == action]
    fix = worst[0][2] or verdicts.remedy(action, gpu.index, gpu.label)
    reason = f"{gpu.label}: " + "; ".join(f"{text} ({a})" for a, text, _ in findings)
    return result(check_id, ROLE, status, "healthy", "; ".join(text for _, text, _ in worst), reason,
                  details=details, fix=fix.format(index=gpu.index, what=gpu.label))


# ---- clocks, temperature, power --------------------------------------------------------------------

# Only the clocks-event reasons that mean a problem are judged (verify.judging.clock_reasons, citing NVIDIA's
# NVML reference): a GPU at its power limit (SW power cap) is a GPU working, never a finding.
SLOWDOWNS = tuple((clock_reasons.smi_field(name), clock_reasons.LABELS[name], CHECK_COOLING)
                  for name in clock_reasons.PROBLEM)
# Power capping holds the average draw at the limit; one sample overshoots it (a healthy H100 at its 700 W
# cap read 722.6 W at most during a burn, 3 %: tests/fixtures/bench/gpu_burn_h100x1.stdout). Above this
# share of the limit the draw is more than capping's overshoot.
POWER_OVERSHOOT = 1.10


def judge_clocks(gpu, margin: Threshold):
    findings = []
    for name, label, fix in SLOWDOWNS:
        if gpu.active(name):
            findings.append((Status.FAIL, f"{label} active", fix))
    headroom = gpu.number("temperature.gpu.tlimit")
    if headroom is not None:
        status, why = margin.judge(headroom)
        if status is not Status.PASS:
            findings.append((status, f"{headroom:.0f} C below the slowdown limit (T.Limit): {why}", CHECK_COOLING))
    draw, limit = gpu.number("power.draw"), gpu.number("enforced.power.limit")
    if draw is not None and limit and draw > limit * POWER_OVERSHOOT:
        findings.append((Status.WARN, f"power draw {draw:.0f} W above the enforced limit {limit:.0f} W "
                         f"(more than {POWER_OVERSHOOT - 1:.0%} over: beyond power capping's overshoot)",
                         CHECK_COOLING))
    capped = any(gpu.active(clock_reasons.smi_field(name)) for name in clock_reasons.AT_POWER_LIMIT)
    readings = {"temperature_c": gpu.number("temperature.gpu"), "tlimit_headroom_c": headroom,
                "memory_temperature_c": gpu.number("temperature.memory"), "power_w": draw, "power_limit_w": limit,
                "clock_event_reasons": gpu.text("clocks_throttle_reasons.active"), "at_power_limit": capped}
    passed = "no slowdown" + (f", {headroom:.0f} C of T.Limit headroom" if headroom is not None else "") + \
        (", at its power limit (SW power cap: normal under load)" if capped else "")
    return _verdict(f"health.gpu.clocks.{gpu.index}", gpu, findings, passed,
                    {"bus_id": gpu.bus_id, "readings": readings, "threshold": margin.to_dict()})


def _each_gpu(check: str, node: Node, judge) -> list:
    reason = driver_reason(node)
    if reason:
        return [skip(f"health.gpu.{check}", ROLE, reason)]
    found = health_smi.reading(node)
    if found.unreadable and not found.gpus and not any(f.action for f in found.failures):
        return [error(f"health.gpu.{check}", ROLE, found.unreadable)]
    if not found.gpus:
        lost = " (health.gpu.presence judges it)" if found.failures else ""
        return [skip(f"health.gpu.{check}", ROLE, (found.why() or "nvidia-smi lists no GPU") + lost)]
    return [judge(gpu) for gpu in found.gpus]


def run_memory(spec: dict, node: Node) -> list:
    previous = node.memo.get(PREVIOUS_COUNTERS) or {}
    return _each_gpu("memory", node, lambda gpu: judge_memory(gpu, previous.get(f"health.gpu.memory.{gpu.index}")))


def run_clocks(spec: dict, node: Node) -> list:
    margin = threshold("gpu_temp_margin_c", spec, node, DERIVED_TEMP_MARGIN)
    return _each_gpu("clocks", node, lambda gpu: judge_clocks(gpu, margin))
