"""One scheduler hook's run (`tunefleet check --mode ...`, parsed by verify.scheduler.cli): build the desired
state, run the mode, answer in the hook's contract (verify.scheduler.modes), write the JSON report and the
Prometheus textfile.

The desired state comes from --spec (the installed hooks pass the one roles/scheduler_hooks rendered), or
is rendered from the role defaults once and then read from the state directory (spec_cache.py)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

from verify import inject
from verify.desired import SpecError, load_spec_file
from verify.history.drain import parse_cap
from verify.node import Node
from verify.scheduler import contract, modes, nvml


def _bad_input(mode: str, message: str) -> int:
    """Bad input never drains: a prolog lets the job run (exit 0), health says 2, npd 'unknown' (2)."""
    print(f"tunefleet check --mode {mode}: {message}", file=sys.stderr if mode != "npd" else sys.stdout)
    return 0 if mode in contract.JOB_MODES else 2


def _write_textfile(report: dict, mode: str, directory: str) -> str:
    from verify.report import prometheus
    from verify.safe_io import SHARED_FILE, open_trusted_dir, write_in_dir

    try:
        dir_fd = open_trusted_dir(directory, create=True, mode=0o755)
        try:
            write_in_dir(dir_fd, f"tunefleet_{mode}.prom", prometheus.render(report, mode=mode), SHARED_FILE,
                         durable=False)  # the next run rewrites it
        finally:
            os.close(dir_fd)
    except OSError as exc:
        return f"Prometheus textfile not written in {directory}: {exc.strerror or exc}"
    return ""


def desired_state(args: argparse.Namespace) -> tuple:
    """(desired state, where it came from): --spec, else the state directory's cached rendering."""
    if args.spec:
        if args.vars:
            raise ValueError("--vars cannot be combined with --spec (the file is already rendered)")
        return load_spec_file(args.spec), f"--spec {args.spec}"
    # Only a hook without --spec reads the cache (hashlib loads OpenSSL: 3-6 ms of every installed hook's start).
    from verify.scheduler import spec_cache

    host = os.uname().nodename  # the name socket.gethostname() gives, without importing socket

    def render() -> dict:
        # Only a first run (or one whose inputs changed) renders: verify.local_run, jinja2 and PyYAML are
        # imported here for that run alone, to keep every other hook start short.
        from verify.local_run import build_spec

        return build_spec(None, args.profile, args.vars, host)

    return spec_cache.cached_spec(args.state_dir, args.profile, args.vars, host, render)


def main(args: argparse.Namespace, reading: Optional[nvml.Reading] = None) -> int:
    """reading: the NVML reading verify.scheduler.cli started (prolog, epilog), else the mode reads NVML itself."""
    mode = args.mode
    try:
        parse_cap(args.drain_cap)
        spec, spec_source = desired_state(args)
        if args.root and not os.path.isdir(args.root):
            raise ValueError(f"--root {args.root}: not a directory")
        runner, node_live = inject.for_run(args.inject, args.root)
    except (ValueError, SpecError, inject.InjectionError, OSError) as exc:
        return _bad_input(mode, str(exc))
    policy, policy_problem = None, ""
    if getattr(args, "policy", None):
        from verify.scheduler.policy import PolicyError, load

        try:
            policy = load(args.policy)
        except PolicyError as exc:  # refused by name; the defaults apply, never a drain for the file
            policy_problem = str(exc)
    node = Node(root=args.root, runner=runner, live=node_live)
    direct = contract.live_node(args.inject, args.root)  # NVML and /dev/kmsg, not the captures or a tree
    name = args.node_name or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    options = modes.Options(mode, state_dir=args.state_dir, drain=not args.no_drain, dry_run=args.dry_run,
                            scheduler=args.scheduler, node_name=name, cap=args.drain_cap,
                            use_nvml=direct, use_kmsg=direct,
                            output_limit=args.max_output, spec_source=spec_source, nvml_reading=reading,
                            policy=policy, policy_problem=policy_problem,
                            npd_events=bool(getattr(args, "npd_events", False)))
    outcome = modes.run_mode(spec, node, options)
    messages = []
    textfile = args.textfile_dir
    if textfile is None:
        textfile = contract.DEFAULT_TEXTFILE_DIR if os.path.isdir(contract.DEFAULT_TEXTFILE_DIR) else ""
    if textfile:
        messages.append(_write_textfile(outcome.report, mode, textfile))
    if args.report:
        from verify.safe_io import PRIVATE_FILE, write_file_atomic

        try:
            write_file_atomic(args.report, json.dumps(outcome.report, indent=1) + "\n", PRIVATE_FILE)
        except OSError as exc:
            messages.append(f"--report {args.report}: not written: {exc.strerror or exc}")
    for row in outcome.actions:
        messages.append(f"{row.status.value} {row.check_id}: {row.reason}")
    reported = outcome.applied.reported() if outcome.applied else []
    if args.dry_run and outcome.applied:  # what the policy would do, finding by finding
        for decision in outcome.applied.decisions:
            print(f"tunefleet {mode}: policy: {decision.line()}", file=sys.stderr if mode == "npd" else sys.stdout)
    if mode in contract.JOB_MODES:
        # Slurm keeps a prolog's stdout to itself; stderr reaches slurmd's log
        if outcome.code:
            print(f"tunefleet {mode}: {outcome.line}", file=sys.stderr)
        elif any(r.status.value == "ERROR" for r in outcome.results):
            print(f"tunefleet {mode}: could not check everything, job allowed: {outcome.line}", file=sys.stderr)
        elif reported:
            print(f"tunefleet {mode}: reported, job allowed: {outcome.line}", file=sys.stderr)
    else:
        print(outcome.line if mode == "npd" else f"tunefleet {mode}: {outcome.line}")
    for message in filter(None, messages):
        print(f"tunefleet {mode}: {message}", file=sys.stderr)
    if direct and (reported or outcome.code):
        _to_syslog(mode, outcome)
    return outcome.code


def _to_syslog(mode: str, outcome) -> None:
    """One line per finding the policy drains or reports, in the node's syslog (the live node only: a drill or
    a --root tree is not this node's news)."""
    import syslog

    syslog.openlog("tunefleet", syslog.LOG_PID, syslog.LOG_DAEMON)
    try:
        for decision in outcome.applied.decisions:
            if decision.do != "ignore":
                level = syslog.LOG_ERR if decision.do == "drain" else syslog.LOG_WARNING
                syslog.syslog(level, f"check --mode {mode}: {decision.line()}")
    finally:
        syslog.closelog()
