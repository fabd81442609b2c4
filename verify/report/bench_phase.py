"""The benchmark phase in words, for every human-facing format: what ran, what was skipped and why,
the profile and how it was chosen, and the wall time. Read from the report's run.bench record."""
from __future__ import annotations


def bench_record(report: dict) -> dict:
    return (report.get("run") or {}).get("bench") or {}


def headline(report: dict) -> str:
    """"benchmarks (quick, 41.3 s): ran nccl, hostcopy, storage; skipped 1" or why none ran."""
    record = bench_record(report)
    if not record:
        return "benchmarks: not recorded (report from an older tunefleet)"
    if record.get("selection") == "none":
        return f"benchmarks: none ({record.get('reason') or 'none asked'})"
    ran = ", ".join(record.get("ran") or []) or "nothing"
    wall = f", {record['wall_s']:.1f} s" if isinstance(record.get("wall_s"), (int, float)) else ""
    skipped = len(record.get("skipped") or [])
    return f"benchmarks ({record.get('selection')}{wall}): ran {ran}" + (f"; skipped {skipped}" if skipped else "")


def lines(report: dict) -> list:
    """The headline, then one line per skipped benchmark, the profile line and the hardware seen."""
    record = bench_record(report)
    out = [headline(report)]
    for item in record.get("skipped") or []:
        out.append(f"skipped {item.get('benchmark')}: {item.get('reason')}")
    if record.get("profile_how"):
        out.append(f"profile: {record['profile_how']}")
    summary = (record.get("hardware") or {}).get("summary")
    if summary:
        out.append(f"hardware: {summary}")
    return out
