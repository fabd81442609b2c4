"""Per-node reports. `build_report` makes the one document (schema tunefleet.node_report/v1) that every
format is rendered from, so a report saved as JSON can be re-rendered later (the fleet does this).
"""
from __future__ import annotations

import datetime
import importlib
import os
from typing import Optional

from verify.judging import verdicts
from verify.payload_schema import schema_problems
from verify.report.schemas import RESULT_SCHEMA
from verify.result import CheckResult, Status, counts, exit_code, sort_for_people
from verify.safe_io import PRIVATE_DIR, PRIVATE_FILE, SHARED_FILE, UnsafePathError, open_trusted_dir, write_in_dir

SCHEMA = "tunefleet.node_report/v1"
# format -> (module, file name); jinja2 is needed by html only.
WRITERS = {
    "json": ("verify.report.json_report", "report.json"),
    "md": ("verify.report.markdown", "report.md"),
    "html": ("verify.report.html", "report.html"),
    "junit": ("verify.report.junit", "report.junit.xml"),
    "prom": ("verify.report.prometheus", "tunefleet.prom"),
}


class OutDirError(ValueError):
    """A report directory that cannot be used; the message is one line naming it and why."""


def check_out_dir(path: str, world_readable: bool = False) -> None:
    """Refuse a report directory before any work, not after with a traceback: one others can change (a
    symlink or directory planted by another user, verify.safe_io), or one we cannot write (a read-only
    mount, a path under a regular file or under /proc). Makes it when missing, as write_reports would."""
    try:
        dir_fd = open_trusted_dir(path, create=True, mode=0o755 if world_readable else PRIVATE_DIR)
        try:
            probe = f".tunefleet-write-test-{os.urandom(6).hex()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd))
            os.unlink(probe, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except UnsafePathError as exc:
        raise OutDirError(f"report directory {path} cannot be used safely: {exc.strerror}") from exc
    except OSError as exc:
        raise OutDirError(f"report directory {path} is not writable: {exc.strerror or exc}") from exc


class FormatUnavailable(RuntimeError):
    """A format cannot be produced on this machine (e.g. HTML without jinja2); the message says why."""


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def build_report(spec: dict, facts: dict, results: list, run: dict) -> dict:
    return {
        "schema": SCHEMA,
        "host": facts.get("host") or spec.get("host") or "unknown",
        "generated_at": utc_now(),
        "run": run,
        "profile": (spec.get("verify") or {}).get("profile"),
        "summary": {"counts": counts(results), "exit_code": exit_code(results), "total": len(results),
                    "action": run_action(results), "recorded": sum(1 for r in results if is_recorded(r))},
        "facts": facts,
        "desired_state": spec,
        "results": [r.to_dict() for r in results],
    }


def results_of(report: dict) -> list:
    """The report's results; a saved report's entry that differs from RESULT_SCHEMA is left out (the fleet
    report names it: verify.fleet.model checks the same schema)."""
    items = report.get("results") if isinstance(report.get("results"), list) else []
    return [CheckResult.from_dict(item) for item in items if not schema_problems(item, RESULT_SCHEMA)]


# Facts and run records may be absent or of the wrong type (a fact that could not be read, an older or
# damaged saved report): every format reads them through these, never by indexing.
def section(mapping: object, *keys: str) -> dict:
    """mapping[k1][k2]... when each step is an object, else {}."""
    for key in keys:
        mapping = mapping.get(key) if isinstance(mapping, dict) else None
    return mapping if isinstance(mapping, dict) else {}


def fact_text(mapping: object, *keys: str, default: str = "?") -> str:
    """The text (or number) at mapping[k1][k2]..., else default: never an object or a list."""
    value = section(mapping, *keys[:-1]).get(keys[-1]) if keys else None
    if isinstance(value, bool) or value is None or value == "" or isinstance(value, (dict, list)):
        return default
    return one_line(value, 200)


def listed(mapping: object, key: str) -> list:
    """mapping[key] when it is a list, else []."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, list) else []


def summary_of(report: dict) -> tuple:
    """(counts by status, exit code) as recorded, recomputed from the results where the record is damaged."""
    recorded = section(report, "summary")
    tally = recorded.get("counts")
    code = recorded.get("exit_code")
    if not (isinstance(tally, dict) and all(isinstance(tally.get(s), int) for s in counts([]))):
        tally = None
    if tally is None or isinstance(code, bool) or not isinstance(code, int):
        results = results_of(report)
        tally, code = tally or counts(results), code if isinstance(code, int) and not isinstance(code, bool) \
            else exit_code(results)
    return {s: tally[s] for s in counts([])}, code


def run_action(results: list) -> str:
    """The most disruptive action class the run's results carry (verify.judging.verdicts), "ok" when none
    does: what the operator does next about this node. A config check judges no class (its FAIL is in the
    counts and the exit code)."""
    return verdicts.worst(a for a in (verdicts.action_of(r.details) for r in results) if a)


def action_of_report(report: dict) -> str:
    """The run's action class as recorded, recomputed from the results where a saved report lacks it."""
    recorded = section(report, "summary").get("action")
    return recorded if recorded in verdicts.ACTIONS else run_action(results_of(report))


def action_note(report: dict) -> str:
    """"action: reboot" for the headline of every human-facing format; "" when the run's class is ok (a config
    FAIL carries no class, and "action ok" beside it would read as "nothing to do")."""
    action = action_of_report(report)
    return "" if action == verdicts.OK else f"action: {action}"


# A figure no floor judges (verify.bench.common.recorded_only) has no verdict. Its status stays PASS in the
# data, so exit codes, the history, the fleet baseline and outliers treat it as "nothing to act on" without
# a sixth status rippling through every consumer and the schema; every format people read shows it as
# RECORDED and counts it apart from PASS (summary.recorded in the JSON).
RECORDED = "RECORDED"


def is_recorded(result: CheckResult) -> bool:
    """A PASS that is no verdict: flagged by recorded_only, or (older reports, and producers that write
    the words themselves) a PASS with no expected value whose reason says "recorded only"."""
    if result.status is not Status.PASS:
        return False
    details = result.details if isinstance(result.details, dict) else {}
    return details.get("recorded_only") is True or (result.expected is None and "recorded only" in result.reason)


def status_label(result: CheckResult) -> str:
    """The status as people read it: RECORDED for a figure with no floor, else the status."""
    return RECORDED if is_recorded(result) else result.status.value


def action_label(result: CheckResult) -> str:
    """"FAIL [reboot]": a result's status with the action class it carries; PASS (and a result with no
    class) is the status alone, RECORDED for a figure no floor judges."""
    action = verdicts.action_of(result.details)
    if result.status is Status.PASS or not action:
        return status_label(result)
    return f"{result.status.value} [{action}]"


def people_counts(report: dict) -> dict:
    """summary_of's counts as the human-facing formats show them: RECORDED apart from PASS."""
    tally, _ = summary_of(report)
    recorded = sum(1 for r in results_of(report) if is_recorded(r))
    shown = {}
    for status, count in tally.items():
        shown[status] = max(count - recorded, 0) if status == Status.PASS.value else count
        if status == Status.PASS.value:
            shown[RECORDED] = recorded
    return shown


def standing(report: dict) -> str:
    """One line on where the node stands, for every human-facing format: on a node tunefleet's roles were
    never applied to (verify --local records whether its ledger exists: run.tunefleet_applied), the FAILs
    the roles remove are what applying site.yml would change, not faults: what `make demo` shows on an
    untuned machine after its check-mode run. "" where the run recorded nothing of it (an older report),
    tunefleet did apply here (a FAIL is then drift), or no such FAIL."""
    applied = section(report, "run").get("tunefleet_applied")
    if applied is not False:
        return ""
    from verify.judging import remedies

    fixable = 0
    for result in results_of(report):
        remedy = remedies.remedy_of(result.to_dict()) if result.status is Status.FAIL else None
        fixable += bool(remedy and remedy.get("kind") == remedies.ROLE and remedy.get("fixable"))
    if not fixable:
        return ""
    return (f"tunefleet's roles were never applied to this node (no ledger): the {fixable} FAIL(s) its roles fix "
            f"are what applying {remedies.SITE} would change, not faults (a --check run changes nothing)")


def host_of(report: dict) -> str:
    return fact_text(report, "host", default="unknown")


def for_people(report: dict) -> list:
    """Results failures first, as every human-facing format lists them."""
    return sort_for_people(results_of(report))


def render(report: dict, fmt: str) -> str:
    if fmt not in WRITERS:
        raise ValueError(f"unknown report format {fmt!r}; known: {', '.join(WRITERS)}")
    return importlib.import_module(WRITERS[fmt][0]).render(report)


def file_mode(fmt: str, world_readable: bool = False) -> int:
    """Reports hold system detail (facts, desired state, tool output): owner-only unless asked.
    The Prometheus textfile holds statuses and figures only, and node_exporter reads it as its own
    user, so it is readable by all."""
    return SHARED_FILE if world_readable or fmt == "prom" else PRIVATE_FILE


def write_reports(report: dict, formats: list, out_dir: str, world_readable: bool = False) -> tuple:
    """(paths written, one message per format skipped). Unknown formats raise ValueError first.

    out_dir is made 0700 when missing (0755 with world_readable) and must be a directory only
    root and the caller can change (UnsafePathError otherwise); each file is a new temporary file
    renamed over its name, so node_exporter and people never read half a report.
    """
    unknown = [f for f in formats if f not in WRITERS]
    if unknown:
        raise ValueError(f"unknown report format(s) {', '.join(unknown)}; known: {', '.join(WRITERS)}")
    dir_fd = open_trusted_dir(out_dir, create=True, mode=0o755 if world_readable else PRIVATE_DIR)
    written, skipped = [], []
    try:
        for fmt in formats:
            try:
                text = render(report, fmt)
            except FormatUnavailable as exc:
                skipped.append(f"{fmt}: skipped, {exc}")
                continue
            write_in_dir(dir_fd, WRITERS[fmt][1], text, file_mode(fmt, world_readable))
            written.append(os.path.join(out_dir, WRITERS[fmt][1]))
    finally:
        os.close(dir_fd)
    return written, skipped


def one_line(value: object, limit: Optional[int] = None) -> str:
    """expected/observed values as short text for tables."""
    if value is None:
        text = ""
    elif isinstance(value, dict):
        text = ", ".join(f"{k}: {v}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value)
    else:
        text = str(value)
    text = " ".join(text.split())
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
