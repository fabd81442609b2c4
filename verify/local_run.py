"""`tunefleet verify --local` (check this node, write its reports) and `tunefleet spec`.

The desired state comes from `--spec FILE`, or is rendered from the role defaults plus `--vars`
files plus a hardware profile's "vars" (`--profile NAME`), the same way playbooks/verify.yml does.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Optional

from verify import inject
from verify.checks.health_common import remember_previous
from verify.desired import SpecError, load_spec_file, load_vars_file, render_spec
from verify.facts.node_facts import gather_facts
from verify.node import Node
from verify.report import WRITERS, OutDirError, build_report, check_out_dir, terminal, utc_now, write_reports
from verify.result import EXIT_BAD_INPUT, CheckResult, Status, exit_code
from verify.safe_io import read_capped


class UsageError(ValueError):
    """Bad command-line input; the message names it."""


# The ledger the roles write before their first change (plugins/module_utils/ledger_core.DEFAULT_LEDGER_PATH;
# tests/unit/test_report_standing.py holds the two equal).
LEDGER_PATH = "/var/lib/tunefleet/ledger.json"


def load_named_profile(name: str) -> dict:
    try:
        from verify.profiles import load_profile
    except ImportError as exc:
        raise UsageError(f"--profile {name}: verify.profiles is not available ({exc})") from None
    try:
        return load_profile(name)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--profile {name}: {exc}") from None


def build_spec(spec_file: Optional[str], profile: Optional[str], vars_files: list, host: str) -> dict:
    """One desired state: a rendered file, or role defaults < profile vars < --vars files."""
    if spec_file:
        if vars_files:
            raise UsageError("--vars cannot be combined with --spec (the file is already rendered)")
        return load_spec_file(spec_file)
    overrides: dict = {}
    if profile:
        profile_vars = load_named_profile(profile).get("vars") or {}
        if not isinstance(profile_vars, dict):
            raise UsageError(f"--profile {profile}: its 'vars' must be a mapping of role variables")
        overrides.update(profile_vars)
    for path in vars_files:
        overrides.update(load_vars_file(path))
    if profile:
        overrides["verify_profile"] = profile
    return render_spec(overrides, hostname=host)


def parse_formats(text: str) -> list:
    formats = [f.strip() for f in (text or "").split(",") if f.strip()]
    unknown = [f for f in formats if f not in WRITERS]
    if unknown:
        raise UsageError(f"--format: unknown format(s) {', '.join(unknown)}; known: {', '.join(WRITERS)}")
    return formats


def bench_profile(spec: dict, facts: dict) -> Optional[dict]:
    return choose_profile(spec, facts)[0]


def choose_profile(spec: dict, facts: dict, node: Optional[Node] = None) -> tuple:
    """(profile or None, one line saying how it was chosen) for the desired state's verify_profile.

    "auto" picks the shipped profile whose `match` fits the node's GPUs; without one the floors
    are derived from the node's link peaks, and the line says which (the report shows it).
    """
    name = (spec.get("verify") or {}).get("profile")
    if name and name != "auto":
        return load_named_profile(name), f"{name}: named by the desired state (verify_profile)"
    hardware = None
    if node is not None and node.is_live:
        from verify.bench.floors import derived_floors
        from verify.facts.hardware import detect

        hardware = detect(node)
    seen = hardware.describe() if hardware else "this node"
    if name == "auto":
        import verify.profiles as profiles

        picked = profiles.pick_profile(facts, by_model=True)
        if picked is not None:
            return picked, f"{picked['name']}: auto, {picked.get('auto_how') or 'its match fits'}; node: {seen}"
    floors = derived_floors(hardware) if hardware else "recorded only"
    why = "no shipped profile matches" if name == "auto" else "no profile named (verify_profile is empty)"
    return None, f"derived from link peaks: {why}; node: {seen}; floors: {floors}"


def check_bench_options(spec: dict) -> None:
    """verify_bench_options refused before anything runs or is written, naming the option."""
    try:
        from verify.bench import check_options
    except ImportError:
        return  # no verify.bench on this node: the benchmark phase says so
    try:
        check_options((spec.get("verify") or {}).get("bench_options"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run_benchmarks(spec: dict, node: Node, facts: dict, names: Optional[list], record: Optional[dict] = None) -> list:
    """verify.bench is imported only here, and its absence is a SKIP, not a failure of the run.

    `record` receives the benchmark phase for the report: profile and how it was chosen, the
    hardware seen, what ran, what was skipped and why, and the wall time.
    """
    record = {} if record is None else record
    if not node.is_live:
        record["reason"] = "benchmarks run on the live node only (--root)"
        return [CheckResult("bench", "verify", Status.SKIP, reason=record["reason"])]
    try:
        from verify.bench import run_benchmarks as bench
        from verify.facts.hardware import detect
    except ImportError as exc:
        record["reason"] = f"verify.bench is not available ({exc})"
        return [CheckResult("bench", "verify", Status.SKIP, reason=record["reason"])]
    start = time.perf_counter()
    try:
        # Detection parses tool output (nvidia-smi, sysfs) a driver update can change: whatever it raises
        # costs the benchmark phase, with the cause, never the run. Named profiles go through it too.
        hardware = detect(node).to_dict()
    except Exception as exc:  # noqa: BLE001 - see above
        record["reason"] = f"hardware detection failed: {type(exc).__name__}: {exc}"
        return [CheckResult("bench", "verify", Status.ERROR, reason=record["reason"],
                            remediation="run `nvidia-smi -q` and `nvidia-smi nvlink --status` by hand; "
                                        "--no-bench checks the configuration meanwhile")]
    try:
        profile, how = choose_profile(spec, facts, node)
    except (UsageError, ValueError, ImportError) as exc:
        return [CheckResult("bench", "verify", Status.ERROR, reason=f"hardware profile: {exc}")]
    record.update(profile=(profile or {}).get("name"), profile_how=how, hardware=hardware)
    try:
        return bench(spec, profile, node, names, record=record)
    finally:
        record["wall_s"] = round(time.perf_counter() - start, 2)


def verify_node(spec: dict, node: Node, bench: bool = True, bench_names: Optional[list] = None,
                history=None) -> dict:
    """Facts, config checks and (optionally) benchmarks for one node: the report document.

    Before any check runs, node.memo["lookback"] says from when the health checks judge kernel and
    driver events: the host's last operator ack in `history` (verify.history.cli.RunHistory), else boot;
    and node.memo["previous_counters"] holds the error counters the host's last recorded run read, and when
    (that run's start; this run's start is the other end of the interval), which the health checks judge the
    increase per minute against (absent: the count since driver load).
    """
    from verify.checks import run_checks
    from verify.history.cli import lookback_of
    from verify.history.record import stamp_to_unix
    from verify.history.store import BOOT
    started = utc_now()
    facts_began = time.perf_counter()
    facts = gather_facts(node)  # first: the host name the history knows this node by
    lookback = BOOT if history is None else lookback_of(history, str(facts.get("host")))
    node.memo["lookback"] = lookback.to_memo()
    previous, read_at = previous_counters_of(history, str(facts.get("host")))
    remember_previous(node, previous, read_at, stamp_to_unix(started))
    phases: dict = {"process_start_s": process_age_s(), "facts_s": round(time.perf_counter() - facts_began, 3)}
    start = time.perf_counter()
    timings: dict = {}
    results = run_checks(spec, node, timings=timings)
    checks_s = time.perf_counter() - start
    phases["config_checks_s"] = round(checks_s, 3)
    bench_record: dict = {"selection": "none", "ran": [], "skipped": []}
    if not bench:
        bench_record["reason"] = "--no-bench: config checks only"
    elif bench_names or (spec.get("verify") or {}).get("benchmarks"):
        bench_rows = run_benchmarks(spec, node, facts, bench_names, bench_record)
        results = peer_access_from_engine(results, bench_record, node) + bench_rows
        explain_bench(results, node)
        phases.update(bench_phases(bench_record))
    else:
        bench_record["reason"] = "the desired state asks for none (verify_benchmarks: [])"
    from verify.judging.remedies import attach as attach_remedies

    attach_remedies(results, spec)  # what removes each finding, checked against this desired state (issue 49)
    run = {
        "phases": phases,
        "started_at": started,
        "lookback": node.memo["lookback"],
        "duration_s": round(time.perf_counter() - start, 3),
        "config_checks_s": round(checks_s, 4),
        "check_timings_s": timings,
        "root": node.root,
        "benchmarks": bool(bench),
        "bench": bench_record,
        # Whether tunefleet's roles ever changed this node (their ledger exists): a config FAIL is then drift,
        # else what applying site.yml would change (verify.report.standing says so).
        "tunefleet_applied": node.exists(LEDGER_PATH),
        "command": "tunefleet " + " ".join(sys.argv[1:]) if sys.argv else "",
        # Which interpreter ran verify and its engines (a fleet run: how verify.fleet.node_python found it).
        "python": dict((spec.get("verify") or {}).get("python") or {}, running=sys.executable),
    }
    return build_report(spec, facts, results, run)


def process_age_s() -> Optional[float]:
    """Seconds since this process started (the interpreter and verify's imports), from /proc; None elsewhere."""
    try:
        stat = read_capped(f"/proc/{os.getpid()}/stat", 4096).decode("ascii", errors="replace")
        started_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        uptime = float(read_capped("/proc/uptime", 256).split()[0])
        return round(max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK")), 3)
    except (OSError, ValueError, IndexError):
        return None


def bench_phases(record: dict) -> dict:
    """Seconds per benchmark phase: the one engine's start (torch, CUDA contexts) and each measurement it made,
    then each family (judging, and the engines of the families the shared one does not cover)."""
    found = {}
    engine = record.get("engine") or {}
    for name, seconds in (engine.get("phases") or {}).items():
        if isinstance(seconds, (int, float)) and name != "process_s":
            found[f"engine.{name}"] = seconds
    for family, seconds in (record.get("family_s") or {}).items():
        found[f"bench.{family}_s"] = seconds
    return found


def largest_phases(phases: dict, count: int = 5) -> str:
    """'engine.allreduce_s 3.1 s, engine.torch_import_s 2.8 s, ...': where the time went, for the terminal."""
    items = sorted(((k, v) for k, v in phases.items() if isinstance(v, (int, float))), key=lambda kv: -kv[1])
    return ", ".join(f"{name.removesuffix('_s')} {seconds:.1f} s" for name, seconds in items[:count])


def time_line(phases: dict, total_s: Optional[float]) -> str:
    """'time: 2.4 s in all (since the process started); largest: facts 0.9 s, ...': the phases are parts of
    the whole, so the whole is the process's age (start-up included), never a part smaller than its parts."""
    whole = f"{total_s:.1f} s in all (since the process started)" if total_s is not None else "total unknown"
    return f"time: {whole}; largest: {largest_phases(phases)}"


def peer_access_from_engine(results: list, record: dict, node: Node) -> list:
    """health.p2p judged on CUDA's own answer where the benchmark engine asked it (measured once, in the
    benchmark phase: the config phase and the scheduler hooks read NVML's, which needs no CUDA context)."""
    from verify.bench.engine_session import last_session
    from verify.checks import health_p2p
    from verify.facts.peer_access import SOURCE_CUDA, PeerAccess

    session = last_session(node)
    peer = (session.payload or {}).get("peer") if session is not None and session.payload else None
    if not isinstance(peer, dict) or not peer.get("pairs"):
        return results
    gpus = {g["index"]: g.get("name", "") for g in session.payload.get("gpus") or []
            if g.get("index") in set(session.payload.get("measured") or [])}
    access = PeerAccess(gpus=gpus, torch_version=str(session.payload.get("torch")), mapped_by="bus id",
                        source=SOURCE_CUDA, can_access={(p["src"], p["dst"]): p["can_access"] for p in peer["pairs"]})
    if len(access.gpus) < 2:
        return results
    refused = access.refused
    links, joined, basis = health_p2p.nvlinked(node, refused) if refused else ({}, set(), "")
    verdict = health_p2p.judge(access, links, joined, basis, health_p2p.fabric_hint(node) if joined else "")
    verdict.details["answered_by"] = "CUDA (cudaDeviceCanAccessPeer) in the benchmark engine"
    earlier = next((r for r in results if r.check_id == health_p2p.CHECK_ID), None)
    if earlier is not None:
        verdict.details["config_phase"] = {"status": earlier.status.value, "reason": earlier.reason}
    record.setdefault("engine", {})["peer_access"] = "health.p2p judged on the engine's CUDA answer"
    return [r for r in results if r.check_id != health_p2p.CHECK_ID] + [verdict]


def explain_bench(results: list, node: Node) -> None:
    """Every benchmark FAIL, WARN or ERROR gets its most likely cause the node shows and an action class
    (verify.bench.causes), in place."""
    from verify.bench.causes import explain

    explain(results, node)


def previous_counters_of(history, host: str) -> tuple:
    """(counters, Unix time they were read or None) of the host's last recorded run (({}, None) with
    --no-history, without one, or when the history cannot be read: then the failure is reported once with the
    run's other history rows, as for the lookback)."""
    from verify.history.record import previous_reading
    from verify.history.store import HistoryError

    if history is None or history.store is None:
        return {}, None
    try:
        return previous_reading(history.store, host)
    except HistoryError as exc:
        history.problem = history.problem or str(exc)
        return {}, None


def main(args) -> int:
    try:
        formats = parse_formats(args.format)
        spec = build_spec(args.spec, args.profile, args.vars, socket.gethostname())
        check_bench_options(spec)
        ensure_writable_dir(args.out, getattr(args, "world_readable", False))
        history = open_history(args)
        drill = getattr(args, "inject", None)
        runner, live = inject.for_run(drill, args.root)
    except (UsageError, SpecError, inject.InjectionError) as exc:
        print(f"tunefleet verify: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    names = [n.strip() for n in args.bench.split(",") if n.strip()] if args.bench else None
    # A drill over a tree: the captures are that node's commands, so its command-based checks run.
    node = Node(root=args.root, runner=runner, probe_login=getattr(args, "probe_login", False),
                live=live)
    try:
        report = verify_node(spec, node, bench=not args.no_bench, bench_names=names, history=history)
    except BaseException:
        history.close()
        raise
    if isinstance(runner, inject.InjectedRunner):  # a drill: nobody may take its verdict for the node's own
        report["run"]["injected"] = {"from": runner.directory, "answered": list(runner.answered)}
    world_readable = getattr(args, "world_readable", False)
    phases = report["run"].setdefault("phases", {})
    # Reports first, history after: a history that cannot be read or written never costs the reports.
    began = time.perf_counter()
    written, messages = write_each_format(report, formats, args.out, world_readable)
    phases["reports_s"] = round(time.perf_counter() - began, 3)
    from verify.history.cli import finish_local

    began = time.perf_counter()
    finish_local(history, report, node)  # judged against its past, recorded, the verdict acted on
    phases["history_s"] = round(time.perf_counter() - began, 3)
    # The report on disk carries every phase: written again once the history's part is known.
    written, more = write_each_format(report, written, args.out, world_readable)
    messages += more
    if not args.quiet:
        tty = sys.stdout.isatty()
        try:
            sys.stdout.write(terminal.render(report, width=0 if tty else 200, colour=tty))
        except Exception as exc:  # noqa: BLE001 - the table is a view of reports already written
            messages.append(f"terminal table not shown, its renderer failed: {type(exc).__name__}: {exc}")
    for message in messages:
        print(f"tunefleet verify: {message}", file=sys.stderr)
    if not args.quiet and written:
        print(f"reports: {', '.join(os.path.join(args.out, WRITERS[f][1]) for f in written)}")
    if not args.quiet:
        print(time_line(phases, process_age_s()))
    return exit_code(CheckResult.from_dict(r) for r in report["results"])


def write_each_format(report: dict, formats: list, out_dir: str, world_readable: bool) -> tuple:
    """(formats written, one message per format not written): each format on its own, so a renderer that
    fails on this report (a fact it did not expect) costs that format only, never the others."""
    from verify.safe_io import UnsafePathError

    written, messages = [], []
    for fmt in formats:
        try:
            done, skipped = write_reports(report, [fmt], out_dir, world_readable)
        except UnsafePathError as exc:
            messages.append(f"{fmt}: not written, {out_dir} cannot be used safely: {exc.strerror}")
            continue
        except OSError as exc:
            messages.append(f"{fmt}: not written to {out_dir}: {exc.strerror or exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - a renderer's bug costs its own format, with the cause
            messages.append(f"{fmt}: not written, its renderer failed on this report: {type(exc).__name__}: {exc}")
            continue
        messages += skipped
        if done:
            written.append(fmt)
    return written, messages


def open_history(args):
    """The history (verify.history) opened and its options checked before any check runs."""
    from verify.history.cli import prepare
    from verify.history.store import HistoryError

    try:
        return prepare(args)
    except (ValueError, HistoryError) as exc:
        raise UsageError(str(exc)) from None


def ensure_writable_dir(path: str, world_readable: bool = False) -> None:
    """Refuse an unusable report directory before any check runs, not after (verify.report.check_out_dir)."""
    try:
        check_out_dir(path, world_readable)
    except OutDirError as exc:
        raise UsageError(str(exc)) from exc


def spec_main(args) -> int:
    try:
        spec = build_spec(None, args.profile, args.vars, args.host)
    except (UsageError, SpecError) as exc:
        print(f"tunefleet spec: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(json.dumps(spec, indent=2) + "\n")
    return 0
