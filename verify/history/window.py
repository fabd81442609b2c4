"""A window of the run history: every run of a time span or of one run key, per host, with its figures, their
statuses and its configuration (what `tunefleet compare` reads when a side is not a run directory).

A window is `FROM..TO` (UTC ISO times or dates, either end may be left empty: `..2026-12-01` is everything
before that day, `2026-12-01..` everything from it) or a run key (a fleet run's directory name, as the fleet
run recorded it). The store writes started_at as UTC ISO text (verify.report.utc_now), so the bounds are
normalised to the same text and compared as text in SQLite (ISO UTC stamps sort as the times do).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from verify.history.store import HistoryStore

SEPARATOR = ".."


@dataclass
class Window:
    text: str  # as the operator wrote it
    since: Optional[str] = None  # normalised UTC ISO, inclusive
    until: Optional[str] = None  # exclusive
    run_key: Optional[str] = None

    def describe(self) -> str:
        if self.run_key is not None:
            return f"runs of key {self.run_key!r}"
        return f"runs from {self.since or 'the first'} to {self.until or 'the last'}"


@dataclass
class WindowRun:
    run_id: int
    started_at: str
    values: dict  # check_id -> finite figure
    statuses: dict  # check_id -> status of every benchmark row the run recorded
    config: Optional[dict] = None
    extra: dict = field(default_factory=dict)


def parse_window(text: str) -> Window:
    """A window from its text; ValueError naming the text and what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"window {text!r}: empty")
    text = text.strip()
    if SEPARATOR not in text:
        return Window(text, run_key=text)
    start, _, end = text.partition(SEPARATOR)
    since, until = _stamp(start, text), _stamp(end, text)
    if since and until and since >= until:
        raise ValueError(f"window {text!r}: its start {start!r} is not before its end {end!r}")
    return Window(text, since=since, until=until)


def _stamp(part: str, text: str) -> Optional[str]:
    part = part.strip()
    if not part:
        return None
    try:
        moment = dt.datetime.fromisoformat(part.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"window {text!r}: {part!r} is not an ISO date or time (2026-12-01, 2026-12-01T06:00)") \
            from None
    if moment.tzinfo is None:  # the store's stamps are UTC; a bare time is read as UTC too
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc).replace(microsecond=0).isoformat()


def runs_in(store: HistoryStore, window: Window, hosts: Optional[list] = None) -> dict:
    """host -> [WindowRun] oldest first, for every run in the window (of the named hosts only, if given).
    Damaged rows are skipped and named in store.warnings, as every reader of the store does."""
    where, params = ("r.run_key = ?", [window.run_key]) if window.run_key is not None else _span(window)
    if hosts:
        where += f" AND h.name IN ({','.join('?' * len(hosts))})"
        params += list(hosts)
    query = ("SELECT r.id, h.name, r.started_at, r.config_set_id, m.check_id, m.status, m.value FROM runs r "
             "JOIN hosts h ON h.id = r.host_id LEFT JOIN measurements m ON m.run_id = r.id "
             f"WHERE {where} ORDER BY r.id")
    with store._errors("read"):  # the store's own error mapping: a locked or foreign file says so by name
        checks = dict(store.db.execute("SELECT id, name FROM checks"))
        runs: dict = {}
        for run_id, host, started_at, config_id, check, status, value in store.db.execute(query, params):
            run = runs.get(run_id)
            if run is None:
                run = runs[run_id] = (host, config_id, WindowRun(run_id, str(started_at), {}, {}))
            if check is None:
                continue
            if check not in checks:
                store._damaged(f"run {run_id}", "measurements.check_id", check, "no such check")
                continue
            name = checks[check]
            run[2].statuses[name] = str(status)
            if value is not None:
                figure = store._figure(run_id, name, value)
                if figure is not None:
                    run[2].values[name] = figure
        configs = store._configs_of({config_id for _, config_id, _ in runs.values() if config_id is not None})
    out: dict = {}
    for run_id in sorted(runs):
        host, config_id, run = runs[run_id]
        run.config = configs.get(config_id)
        out.setdefault(host, []).append(run)
    return out


def _span(window: Window) -> tuple:
    clauses, params = ["1 = 1"], []
    if window.since:
        clauses.append("r.started_at >= ?")
        params.append(window.since)
    if window.until:
        clauses.append("r.started_at < ?")
        params.append(window.until)
    return " AND ".join(clauses), params
