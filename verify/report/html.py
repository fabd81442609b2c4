"""The node report as one self-contained HTML page (inline CSS, no external resources), rendered with
Jinja2 from templates/report.html.j2. jinja2 is imported here only: a bare node skips this format.

The template reads only the plain text `node_view` prepares: any fact may be absent or of the wrong
type (a fact that could not be read, a damaged saved report), and the page is still written."""
from __future__ import annotations

from pathlib import Path

from verify.bounded_load import finite_number
from verify.report import (
    FormatUnavailable,
    action_label,
    action_note,
    bench_table,
    fact_text,
    for_people,
    host_of,
    listed,
    one_line,
    people_counts,
    section,
    standing,
    status_label,
    summary_of,
)
from verify.report.bench_phase import lines as bench_lines
from verify.report.trend_plots import report_trends
from verify.result import Status

TEMPLATE = "report.html.j2"


def template_dir() -> Path:
    from verify.desired import project_root

    return project_root() / "templates"


def node_view(report: dict) -> dict:
    """Every fact the page shows, as text: '?' or 'none' where a fact is absent or not what it should be."""
    facts = section(report, "facts")
    cpu = section(facts, "cpu")
    memory_kib = finite_number(facts.get("memory_kib"))
    gpus = section(facts, "gpus")
    gpu_list = [g for g in listed(gpus, "gpus") if isinstance(g, dict)]
    if gpu_list:
        gpu_line = (f"{len(gpu_list)} × {fact_text(gpu_list[0], 'name')} (driver {fact_text(gpus, 'driver_version')}, "
                    f"CUDA {fact_text(gpus, 'cuda_driver_version')}, via {fact_text(gpus, 'source')})")
    else:
        gpu_line = f"none: {fact_text(gpus, 'unavailable_reason', default='not reported')}"
    run = section(report, "run")
    counts, code = summary_of(report)
    return {
        "host": host_of(report),
        "generated_at": fact_text(report, "generated_at"),
        "profile": fact_text(report, "profile", default="none"),
        "exit_code": code,
        "action": action_note(report),
        "standing": standing(report),
        "counts": people_counts(report),
        "os_name": fact_text(facts, "os", "pretty_name", default="unknown OS"),
        "kernel": fact_text(facts, "kernel"),
        "cpu": f"{fact_text(cpu, 'model')} ({fact_text(cpu, 'cpus_online')} CPUs, "
               f"{len(section(cpu, 'numa_nodes'))} NUMA nodes)",
        "memory": f"{memory_kib / 1048576:.1f} GiB" if memory_kib else "?",
        "gpus": gpu_line,
        "nics": ", ".join(_nic(n) for n in listed(facts, "nics") if isinstance(n, dict)) or "none",
        "block_devices": ", ".join(fact_text(d, "name") for d in listed(facts, "block_devices")
                                   if isinstance(d, dict)) or "none",
        "tools": " · ".join(f"{one_line(k)} {fact_text(section(facts, 'tool_versions'), k, default='absent')}"
                            for k in section(facts, "tool_versions")),
        "run": f"{fact_text(run, 'duration_s')} s in all, config checks {fact_text(run, 'config_checks_s')} s",
    }


def _nic(nic: dict) -> str:
    parts = [f"MTU {fact_text(nic, 'mtu')}"]
    if finite_number(nic.get("speed_mbps")):
        parts.append(f"{fact_text(nic, 'speed_mbps')} Mb/s")
    numa = finite_number(nic.get("numa_node"))
    if numa is not None and numa >= 0:
        parts.append(f"NUMA {fact_text(nic, 'numa_node')}")
    return f"{fact_text(nic, 'name')} ({', '.join(parts)})"


def render(report: dict) -> str:
    try:
        import jinja2
    except ImportError:
        raise FormatUnavailable("jinja2 is not installed on this machine (HTML is rendered on the controller: "
                                "`tunefleet report` or copy report.json)") from None
    directory = template_dir()
    if not (directory / TEMPLATE).is_file():
        raise FormatUnavailable(f"template {TEMPLATE} not found under {directory}")
    from verify.desired import template_environment  # sandboxed: the one Jinja environment (verify.desired)

    env = template_environment(directory, autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["one_line"] = one_line
    env.filters["action_label"] = action_label
    env.filters["status_label"] = status_label
    results = for_people(report)
    # The page's order: what was measured, then the health and config findings, then trends and every row.
    findings = [r for r in results if not bench_table.is_benchmark(r) and r.status not in (Status.PASS, Status.SKIP)]
    shown = set(map(id, findings))
    return env.get_template(TEMPLATE).render(node=node_view(report), rows=result_rows(
                                                 [r for r in results if id(r) not in shown]), findings=findings,
                                             bench_rows=bench_rows(report), bench_lines=bench_lines(report),
                                             history_plots=report_trends(report))


def result_rows(results: list) -> list:
    """The "every other result" table: each result not already listed as a finding, in order, with SKIPs
    that give the same reason folded into one row ([(result, [check ids it stands for])]): "no GPU on this
    node" said once for the fifteen checks it skipped."""
    rows: list = []
    skips: dict = {}
    for r in results:
        if r.status is Status.SKIP and r.reason:
            if r.reason in skips:
                skips[r.reason][1].append(r.check_id)
                continue
            skips[r.reason] = (r, [r.check_id])
            rows.append(skips[r.reason])
        else:
            rows.append((r, [r.check_id]))
    return rows


def bench_rows(report: dict) -> list:
    """(BenchRow, its inline SVG bar) per benchmark result, failures first."""
    return [(row, bench_table.bar_svg(row)) for row in bench_table.rows(report)]
