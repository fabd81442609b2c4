"""The benchmark phase in words, for every human-facing format: what ran, what was skipped and why,
the profile and how it was chosen, and the wall time. Read from the report's run.bench record, which
may be absent or damaged in a saved report: every field is read by its type, never indexed."""
from __future__ import annotations

from verify.bounded_load import finite_number
from verify.report import fact_text, listed, section


def bench_record(report: dict) -> dict:
    return section(report, "run", "bench")


def headline(report: dict) -> str:
    """"benchmarks (quick, 41.3 s): ran nccl, hostcopy, storage; skipped 1" or why none ran."""
    record = bench_record(report)
    if not record:
        return "benchmarks: not recorded (report from an older tunefleet)"
    if record.get("selection") == "none":
        return f"benchmarks: none ({fact_text(record, 'reason', default='none asked')})"
    ran = ", ".join(str(name) for name in listed(record, "ran")) or "nothing"
    wall_s = finite_number(record.get("wall_s"))
    wall = f", {wall_s:.1f} s" if wall_s is not None else ""
    skipped = len(listed(record, "skipped"))
    more = f"; skipped {skipped}" if skipped else ""
    return f"benchmarks ({fact_text(record, 'selection')}{wall}): ran {ran}{more}"


def lines(report: dict) -> list:
    """The headline, then one line per skipped benchmark, the profile line and the hardware seen."""
    record = bench_record(report)
    out = [headline(report)]
    by_reason: dict = {}  # each reason once: "skipped gpu, hostcopy: no GPU on this node: ..."
    for item in (i for i in listed(record, "skipped") if isinstance(i, dict)):
        by_reason.setdefault(fact_text(item, "reason"), []).append(fact_text(item, "benchmark"))
    out += [f"skipped {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
    how = fact_text(record, "profile_how", default="")
    if how:
        out.append(f"profile: {how}")
    summary = fact_text(record, "hardware", "summary", default="")
    if summary and summary not in how:  # the profile line names the node already: each reason once
        out.append(f"hardware: {summary}")
    return out
