"""The history database: one SQLite file, every verify run appended to it in one transaction.

Why SQLite (standard library): one file, no server, safe for several writers at once (WAL mode,
a busy timeout, writes in BEGIN IMMEDIATE transactions), and indexed queries stay fast at 10,000
hosts x 100 runs. The file is ours only when its application_id says so: a foreign database or a
damaged file is refused with a message naming it, and never written, so a wrong --history cannot
destroy someone's data. The schema carries its version (PRAGMA user_version) and is migrated in
place, inside the same transaction that checks the version, so two runs cannot migrate twice.

Reading is total: a row damaged by hand or by another tool (a figure that is not a number, a config set
that is not a JSON object, a reference to a check that is gone) is skipped, and `warnings` names the
file, the run and the field, once each, for the caller to report. A history that cannot be written here
(a read-only directory or file system, a lock held past the busy timeout) is HistoryUnavailable: a run
goes on without it; a file that is not ours stays a refusal (HistoryError).

Lookback (issue 26 item 3): the health judges count kernel and driver events from `Lookback.since_utc`:
the time of the host's last operator acknowledgement (`tunefleet ack`), or boot when there is none. It is
deliberately not the previous run's start: an event the previous run reported as FAIL and nobody
acknowledged must keep failing, or a broken GPU would pass on the second run. The previous run's start
(`previous_run_utc`) is given beside it, so a judge can mark events "new since the last run".

Counters (issue 26 item 3): each run keeps, per health check, the error counters it read (a small JSON
object, at most COUNTERS_BODY_LIMIT characters; verify.history.record says which). The next run of the host
reads them back (`last_counters`) and judges each counter by its increase since then, "since driver load"
beside it. Unlike events, counters are deliberately taken from the previous run: a count already reported
stays in the total the judge shows, and a count that went down (a driver reload) is judged whole again.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional
from urllib.parse import quote

APPLICATION_ID = 0x54464831  # "TFH1": marks the file as a tunefleet history
BUSY_TIMEOUT_MS = 30_000  # a fleet's worth of concurrent appends, each a few milliseconds
# One check's counters as stored (compact JSON). An 8-GPU baseboard's GPU with 18 NVLink links and their 3
# error counters is about 1,200 characters; a larger body is not stored and its next run judges since driver load.
COUNTERS_BODY_LIMIT = 8_192

# Each entry brings the schema from version i to i + 1; never edit one that has shipped.
MIGRATIONS = (
    # 1: hosts, benchmark figures per run.
    """
    CREATE TABLE hosts (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
    CREATE TABLE checks (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, unit TEXT NOT NULL DEFAULT '',
                         higher_is_better INTEGER NOT NULL DEFAULT 1);
    CREATE TABLE runs (id INTEGER PRIMARY KEY, host_id INTEGER NOT NULL REFERENCES hosts(id),
                       started_at TEXT NOT NULL, source TEXT NOT NULL, run_key TEXT NOT NULL,
                       worst TEXT NOT NULL, exit_code INTEGER NOT NULL, tool_version TEXT NOT NULL DEFAULT '',
                       UNIQUE (host_id, run_key));
    CREATE INDEX runs_by_host ON runs (host_id, id);
    CREATE TABLE measurements (run_id INTEGER NOT NULL REFERENCES runs(id), check_id INTEGER NOT NULL
                               REFERENCES checks(id), host_id INTEGER NOT NULL, status TEXT NOT NULL, value REAL,
                               PRIMARY KEY (run_id, check_id)) WITHOUT ROWID;
    CREATE INDEX measurements_by_host ON measurements (host_id, check_id, run_id);
    """,
    # 2: the configuration each run saw, deduplicated (a uniform fleet shares one set), for drift; runs found
    # by key (a fleet run's regression pass).
    """
    CREATE TABLE config_sets (id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE, body TEXT NOT NULL);
    ALTER TABLE runs ADD COLUMN config_set_id INTEGER REFERENCES config_sets(id);
    CREATE INDEX runs_by_key ON runs (run_key);
    """,
    # 3: operator acknowledgements (`tunefleet ack`): events before the last one are history, not faults.
    """
    CREATE TABLE acks (id INTEGER PRIMARY KEY, host_id INTEGER NOT NULL REFERENCES hosts(id),
                       at_utc TEXT NOT NULL, reason TEXT NOT NULL, who TEXT NOT NULL);
    CREATE INDEX acks_by_host ON acks (host_id, id);
    """,
    # 4: each run's health counters per check (NVLink, IB, ECC / remap counts), judged as deltas by the next run.
    """
    CREATE TABLE counters (run_id INTEGER NOT NULL REFERENCES runs(id), check_id TEXT NOT NULL,
                           body TEXT NOT NULL, PRIMARY KEY (run_id, check_id)) WITHOUT ROWID;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(RuntimeError):
    """The history file cannot be used; the message names it, says why and what was left untouched."""


class HistoryUnavailable(HistoryError):
    """The history cannot be made or written here (permissions, a read-only file system, a held lock):
    nothing is wrong with the node or the file, so a run goes on unrecorded and says so once."""


@dataclass
class Measurement:
    check_id: str
    status: str
    value: Optional[float]
    unit: str = ""
    higher_is_better: bool = True


@dataclass
class RunRecord:
    """One run of one host, as the store keeps it."""

    host: str
    started_at: str
    source: str  # "local" or "fleet"
    run_key: str  # unique per host: a fleet run's directory name, a local run's random id
    worst: str
    exit_code: int
    measurements: list  # Measurement
    config: dict  # name -> value text, for drift
    tool_version: str = ""
    counters: dict = field(default_factory=dict)  # check_id -> its counters (verify.history.record.counters_of)


@dataclass
class Ack:
    """An operator's word that the host was repaired: events before at_utc are history, not faults."""

    host: str
    at_utc: str
    reason: str
    who: str  # the invoking user's name, from the real uid


@dataclass
class Lookback:
    """From when a host's events are judged (see the module docstring for the rule)."""

    since_utc: Optional[str]  # None: since boot
    source: str  # "operator ack <stamp>: <reason>" or "boot"
    previous_run_utc: Optional[str]  # the host's last recorded run, for "new since the last run"

    def to_memo(self) -> dict:
        """The shape the health judges read from node.memo["lookback"]."""
        return {"since_utc": self.since_utc, "source": self.source, "previous_run_utc": self.previous_run_utc}


BOOT = Lookback(None, "boot", None)


@dataclass
class PastRun:
    run_id: int
    started_at: str
    values: dict  # check_id -> value (finite figures only)
    config: Optional[dict]


@dataclass
class HostRuns:
    """One host's runs in the history, summed up: the last run's time, source, worst status and exit code."""

    host: str
    runs: int
    first_at: str
    last_at: str
    last_source: str
    last_worst: str
    last_exit_code: int


class HistoryStore:
    """An open, validated, migrated history file. Use as a context manager or call close()."""

    def __init__(self, path: str, connection: sqlite3.Connection) -> None:
        self.path = path
        self.db = connection
        self.warnings: list = []  # damaged rows skipped while reading, one line each (see _damaged)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (IMMEDIATE) so concurrent writers queue on the busy timeout
        instead of failing on a lock upgrade; committed whole or rolled back whole."""
        with self._errors("write to"):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:  # read-only, locked, disk full: the place, not the file
            raise HistoryUnavailable(f"history {self.path}: cannot {doing} it: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"history {self.path}: cannot {doing} it: {exc}") from exc

    def _damaged(self, where: str, field_name: str, value: object, why: str) -> None:
        """Note a skipped row once: the file, which row, which field, what it held."""
        shown = repr(value)
        line = (f"history {self.path}: {where}: field {field_name} is {shown[:60]}{'…' if len(shown) > 60 else ''}"
                f" ({why}): skipped")
        if line not in self.warnings:
            self.warnings.append(line)

    def _figure(self, run_id: object, check: object, value: object) -> Optional[float]:
        """A stored figure, or None (noted) when the row holds something that is not a number."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        self._damaged(f"run {run_id}, check {check}", "measurements.value", value, "not a number")
        return None

    def _config(self, config_id: object, body: object) -> Optional[dict]:
        try:
            config = json.loads(body) if isinstance(body, (str, bytes)) else None
        except ValueError:
            config = None
        if isinstance(config, dict):
            return config
        self._damaged(f"config set {config_id}", "config_sets.body", body, "not a JSON object")
        return None

    # ---- writing -------------------------------------------------------------------------------

    def record(self, run: RunRecord) -> Optional[int]:
        """Append one run (all of it or nothing); None when this host's run_key is already recorded."""
        return self.record_many([run])[0]

    def record_many(self, runs: Iterable[RunRecord]) -> list:
        """Append runs in one transaction (a fleet run is one write, not 10,000)."""
        ids = []
        with self.transaction() as db:
            host_ids, check_ids = {}, {}
            for run in runs:
                host_id = host_ids.get(run.host) or self._id(db, "hosts", run.host)
                host_ids[run.host] = host_id
                config_id = self._config_set(db, run.config) if run.config else None
                cursor = db.execute(
                    "INSERT OR IGNORE INTO runs (host_id, started_at, source, run_key, worst, exit_code, tool_version,"
                    " config_set_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (host_id, run.started_at, run.source, run.run_key, run.worst, run.exit_code, run.tool_version,
                     config_id))
                if not cursor.rowcount:
                    ids.append(None)
                    continue
                run_id = cursor.lastrowid
                rows = []
                for m in run.measurements:
                    if m.check_id not in check_ids:
                        check_ids[m.check_id] = self._check_id(db, m)
                    rows.append((run_id, check_ids[m.check_id], host_id, m.status, m.value))
                db.executemany("INSERT OR REPLACE INTO measurements (run_id, check_id, host_id, status, value) "
                               "VALUES (?, ?, ?, ?, ?)", rows)
                db.executemany("INSERT OR REPLACE INTO counters (run_id, check_id, body) VALUES (?, ?, ?)",
                               [(run_id, check, body) for check, body in _counter_bodies(run.counters)])
                ids.append(run_id)
        return ids

    @staticmethod
    def _id(db: sqlite3.Connection, table: str, name: str) -> int:
        db.execute(f"INSERT OR IGNORE INTO {table} (name) VALUES (?)", (name,))
        return db.execute(f"SELECT id FROM {table} WHERE name = ?", (name,)).fetchone()[0]

    @staticmethod
    def _check_id(db: sqlite3.Connection, m: Measurement) -> int:
        db.execute("INSERT OR IGNORE INTO checks (name, unit, higher_is_better) VALUES (?, ?, ?)",
                   (m.check_id, m.unit, int(m.higher_is_better)))
        return db.execute("SELECT id FROM checks WHERE name = ?", (m.check_id,)).fetchone()[0]

    @staticmethod
    def _config_set(db: sqlite3.Connection, config: dict) -> int:
        body = json.dumps(config, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        db.execute("INSERT OR IGNORE INTO config_sets (digest, body) VALUES (?, ?)", (digest, body))
        return db.execute("SELECT id FROM config_sets WHERE digest = ?", (digest,)).fetchone()[0]

    def acknowledge(self, ack: Ack) -> None:
        """Record an operator's acknowledgement of a host (made known to the history if it is not yet)."""
        with self.transaction() as db:
            host_id = self._id(db, "hosts", ack.host)
            db.execute("INSERT INTO acks (host_id, at_utc, reason, who) VALUES (?, ?, ?, ?)",
                       (host_id, ack.at_utc, ack.reason, ack.who))

    # ---- reading -------------------------------------------------------------------------------

    def last_ack(self, host: str) -> Optional[Ack]:
        with self._errors("read"):
            row = self.db.execute(
                "SELECT a.id, a.at_utc, a.reason, a.who FROM acks a JOIN hosts h ON h.id = a.host_id "
                "WHERE h.name = ? ORDER BY a.id DESC LIMIT 1", (host,)).fetchone()
        if row is None:
            return None
        ack_id, at_utc, reason, who = row
        if not isinstance(at_utc, str) or not at_utc:
            self._damaged(f"ack {ack_id} of {host}", "acks.at_utc", at_utc, "not a time stamp")
            return None
        return Ack(host, at_utc, str(reason), str(who))

    def lookback(self, host: str) -> Lookback:
        """Since when the host's events are judged: its last ack, else boot; and its previous run's start."""
        ack = self.last_ack(host)
        with self._errors("read"):
            row = self.db.execute(
                "SELECT r.id, r.started_at FROM runs r JOIN hosts h ON h.id = r.host_id WHERE h.name = ? "
                "ORDER BY r.id DESC LIMIT 1", (host,)).fetchone()
        previous = None
        if row is not None:
            if isinstance(row[1], str) and row[1]:
                previous = row[1]
            else:
                self._damaged(f"run {row[0]} of {host}", "runs.started_at", row[1], "not a time stamp")
        if ack is None:
            return Lookback(None, BOOT.source, previous)
        return Lookback(ack.at_utc, f"operator ack {ack.at_utc}: {ack.reason}", previous)

    def last_counters(self, host: str, depth_of: Callable[[str], Optional[int]]) -> dict:
        """{check_id: counters} the host's last recorded run kept ({} when none, or when it kept none).

        depth_of(check_id) says how the caller's judge expects them nested: 1 for {name: count}, 2 for
        {part: {name: count}}, None for a check it does not judge (left out). A row of another shape, or not
        JSON, or with a count that is not a non-negative whole number, is damaged: skipped and noted.
        """
        return self.last_reading(host, depth_of)[0]

    def last_reading(self, host: str, depth_of: Callable[[str], Optional[int]]) -> tuple:
        """(last_counters, that run's started_at or None): the counters and when they were read, of one run."""
        with self._errors("read"):
            row = self.db.execute(
                "SELECT r.id, r.started_at FROM runs r JOIN hosts h ON h.id = r.host_id WHERE h.name = ? "
                "ORDER BY r.id DESC LIMIT 1", (host,)).fetchone()
            if row is None:
                return {}, None
            rows = self.db.execute("SELECT check_id, body FROM counters WHERE run_id = ?", (row[0],)).fetchall()
        started = row[1] if isinstance(row[1], str) and row[1] else None
        out = {}
        for check, body in rows:
            depth = depth_of(check) if isinstance(check, str) else None
            if depth is None:
                continue
            try:
                counters = json.loads(body) if isinstance(body, (str, bytes)) else None
            except ValueError:
                counters = None
            if _nested_counts(counters, depth):
                out[check] = counters
            else:
                self._damaged(f"run {row[0]}, check {check}", "counters.body", body,
                              f"not {'{name: count}' if depth == 1 else '{part: {name: count}}'}")
        return out, started

    def hosts(self) -> list:
        with self._errors("read"):
            return [row[0] for row in self.db.execute("SELECT name FROM hosts ORDER BY name")]

    def host_runs(self) -> list:
        """[HostRuns] per host, by name: how many runs, the first one's time and the last one (`tunefleet history`)."""
        query = ("SELECT h.name, agg.n, agg.first, r.started_at, r.source, r.worst, r.exit_code FROM "
                 "(SELECT host_id, count(*) AS n, min(started_at) AS first, max(id) AS last FROM runs GROUP BY host_id)"
                 " agg JOIN hosts h ON h.id = agg.host_id JOIN runs r ON r.id = agg.last ORDER BY h.name")
        with self._errors("read"):
            return [HostRuns(*(str(v) if i not in (1, 6) else v for i, v in enumerate(row)))
                    for row in self.db.execute(query)]

    def checks(self) -> dict:
        """check_id -> (unit, higher_is_better)."""
        with self._errors("read"):
            return {name: (unit, bool(hib)) for name, unit, hib in
                    self.db.execute("SELECT name, unit, higher_is_better FROM checks")}

    def past_runs(self, host: str, limit: int, before_run_id: Optional[int] = None) -> list:
        """The host's last `limit` runs (before a given run, if named), newest first, with their figures."""
        with self._errors("read"):
            row = self.db.execute("SELECT id FROM hosts WHERE name = ?", (host,)).fetchone()
            if row is None:
                return []
            bound = before_run_id if before_run_id is not None else 2 ** 62
            runs = self.db.execute(
                "SELECT r.id, r.started_at, c.body FROM runs r LEFT JOIN config_sets c ON c.id = r.config_set_id "
                "WHERE r.host_id = ? AND r.id < ? ORDER BY r.id DESC LIMIT ?", (row[0], bound, limit)).fetchall()
            return self._with_values(runs)

    def latest_runs(self, limit: int, run_key: Optional[str] = None) -> dict:
        """host -> its last `limit` runs newest first, for every host (the fleet regression pass).

        With run_key, only hosts that have a run of that key, counted from that run back. One query:
        10,000 hosts x 100 runs is read in well under a second (the per-host limit runs inside SQLite).
        """
        anchors = ("SELECT host_id, id FROM runs WHERE run_key = ?" if run_key is not None
                   else "SELECT host_id, max(id) FROM runs GROUP BY host_id")
        query = (f"WITH anchors(host_id, anchor) AS ({anchors}) "
                 "SELECT r.id, r.host_id, r.started_at, r.config_set_id, m.check_id, m.value FROM anchors a "
                 "JOIN runs r ON r.id IN (SELECT id FROM runs WHERE host_id = a.host_id AND id <= a.anchor "
                 "ORDER BY id DESC LIMIT ?) "
                 "LEFT JOIN measurements m ON m.run_id = r.id AND m.value IS NOT NULL")
        params = (run_key, limit) if run_key is not None else (limit,)
        with self._errors("read"):
            names = dict(self.db.execute("SELECT id, name FROM hosts"))
            checks = dict(self.db.execute("SELECT id, name FROM checks"))
            runs: dict = {}
            for run_id, host_id, started_at, config_id, check, value in self.db.execute(query, params):
                run = runs.get(run_id)
                if run is None:
                    run = runs[run_id] = (host_id, config_id, PastRun(run_id, started_at, {}, None))
                if check is None:
                    continue
                if check not in checks:
                    self._damaged(f"run {run_id}", "measurements.check_id", check, "no such check")
                    continue
                figure = self._figure(run_id, checks[check], value)
                if figure is not None:
                    run[2].values[checks[check]] = figure
            configs = self._configs_of({config_id for _, config_id, _ in runs.values() if config_id is not None})
        out: dict = {}
        for run_id in sorted(runs, reverse=True):
            host_id, config_id, run = runs[run_id]
            if host_id not in names:
                self._damaged(f"run {run_id}", "runs.host_id", host_id, "no such host")
                continue
            run.config = configs.get(config_id)
            out.setdefault(names[host_id], []).append(run)
        return out

    def trend(self, host: str, checks: Optional[list] = None, last: Optional[int] = None) -> list:
        """[(started_at, run_key, check_id, status, value)] oldest first, for one host."""
        with self._errors("read"):
            row = self.db.execute("SELECT id FROM hosts WHERE name = ?", (host,)).fetchone()
            if row is None:
                return []
            bound = 0
            if last:
                ids = self.db.execute("SELECT id FROM runs WHERE host_id = ? ORDER BY id DESC LIMIT ?",
                                      (row[0], last)).fetchall()
                bound = ids[-1][0] if ids else 0
            query = ("SELECT r.started_at, r.run_key, c.name, m.status, m.value, r.id FROM measurements m "
                     "JOIN runs r ON r.id = m.run_id JOIN checks c ON c.id = m.check_id "
                     "WHERE m.host_id = ? AND m.run_id >= ?")
            params: list = [row[0], bound]
            if checks:
                query += f" AND c.name IN ({','.join('?' * len(checks))})"
                params += list(checks)
            rows = self.db.execute(query + " ORDER BY m.run_id, c.name", params).fetchall()
        return [(str(started_at), str(run_key), check, str(status),
                 None if value is None else self._figure(run_id, check, value))
                for started_at, run_key, check, status, value, run_id in rows]

    def _with_values(self, runs: list) -> list:
        values = self._values_of([r[0] for r in runs])
        return [PastRun(run_id, str(started_at), values.get(run_id, {}), self._config(run_id, body) if body else None)
                for run_id, started_at, body in runs]

    def _values_of(self, run_ids: list) -> dict:
        """run id -> {check_id: value} for finite figures, for a few runs (one host's window)."""
        if not run_ids:
            return {}
        names = dict(self.db.execute("SELECT id, name FROM checks"))
        out: dict = {}
        for run_id, check, value in self.db.execute(
                f"SELECT run_id, check_id, value FROM measurements WHERE run_id IN ({','.join('?' * len(run_ids))}) "
                "AND value IS NOT NULL", list(run_ids)):
            if check not in names:
                self._damaged(f"run {run_id}", "measurements.check_id", check, "no such check")
                continue
            figure = self._figure(run_id, names[check], value)
            if figure is not None:
                out.setdefault(run_id, {})[names[check]] = figure
        return out

    def _configs_of(self, ids: set) -> dict:
        out = {}
        for config_id in ids:
            body = self.db.execute("SELECT body FROM config_sets WHERE id = ?", (config_id,)).fetchone()
            out[config_id] = self._config(config_id, body[0]) if body else None
        return out


def _nested_counts(value: object, depth: int) -> bool:
    """value is {text: count} nested `depth` deep, each count a non-negative whole number."""
    if not isinstance(value, dict):
        return False
    if depth <= 1:
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values())
    return all(_nested_counts(v, depth - 1) for v in value.values())


def _counter_bodies(counters: dict) -> list:
    """[(check_id, compact JSON)] of the counters small enough to keep (COUNTERS_BODY_LIMIT)."""
    bodies = []
    for check, values in sorted((counters or {}).items()):
        body = json.dumps(values, sort_keys=True, separators=(",", ":"))
        if len(body) <= COUNTERS_BODY_LIMIT:
            bodies.append((check, body))
    return bodies


# ---- opening -----------------------------------------------------------------------------------


def default_path(environ: Optional[dict] = None, euid: Optional[int] = None) -> str:
    """Where the history lives unless --history names a file.

    TUNEFLEET_HISTORY first (tests point it at a temporary file); root keeps the node's history in
    /var/lib/tunefleet, anyone else in their XDG data directory (~/.local/share/tunefleet).
    """
    environ = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    if environ.get("TUNEFLEET_HISTORY"):
        return environ["TUNEFLEET_HISTORY"]
    if euid == 0:
        return "/var/lib/tunefleet/history.sqlite"
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "tunefleet", "history.sqlite")


def open_store(path: str, create: bool = True) -> HistoryStore:
    """Open (and with create, make) the history at path: checked, refused, or migrated, before any use.

    The directory is made private (0700) if missing and must be one only root and the caller can
    change (verify.safe_io): the database, its WAL and its lock files are written there as root.
    """
    from verify.safe_io import PRIVATE_DIR, PRIVATE_FILE, UnsafePathError, open_trusted_dir

    path = os.path.abspath(path)
    directory, name = os.path.split(path)
    try:
        dir_fd = open_trusted_dir(directory, create=create, mode=PRIVATE_DIR)
    except UnsafePathError as exc:
        raise HistoryError(f"history {path}: its directory cannot be used safely: {exc.strerror}") from exc
    except OSError as exc:
        raise HistoryUnavailable(f"history {path}: directory {directory}: {exc.strerror or exc}") from exc
    try:
        _check_file(dir_fd, name, path, create, PRIVATE_FILE)
    finally:
        os.close(dir_fd)
    try:
        # mode=rw: SQLite never creates the file itself (we made it above, private, without following links).
        connection = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, isolation_level=None,
                                     timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    except sqlite3.Error as exc:
        raise HistoryError(f"history {path}: cannot open it: {exc}") from exc
    try:
        _prepare(connection, path)
    except BaseException:
        connection.close()
        raise
    return HistoryStore(path, connection)


def _check_file(dir_fd: int, name: str, path: str, create: bool, mode: int) -> None:
    """The file is a regular file owned by root or us (never a link, a FIFO or a device); made if missing."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise HistoryError(f"history {path} does not exist (no run recorded there yet)") from None
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                             mode, dir_fd=dir_fd))
        except FileExistsError:
            pass  # another run made it meanwhile: checked below like any file
        except OSError as exc:  # a read-only directory or file system
            raise HistoryUnavailable(f"history {path}: cannot create it in {os.path.dirname(path)}: "
                                     f"{exc.strerror or exc}") from exc
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise HistoryError(f"history {path} is a symlink: refusing to follow it as root; name the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise HistoryError(f"history {path} is not a regular file")
    if st.st_uid not in (0, os.geteuid()):
        raise HistoryError(f"history {path} is owned by uid {st.st_uid}, not root or us: refusing to use it")


def _prepare(db: sqlite3.Connection, path: str) -> None:
    """Refuse a file that is not ours before anything is written to it, then migrate to SCHEMA_VERSION."""
    try:
        # One read transaction: read one statement at a time, a run that raced to create the file was seen half
        # made (its tables committed after this read application_id 0) and refused as another program's.
        db.execute("BEGIN")
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"history {path} is not a readable SQLite database ({exc}): it is left untouched; "
                           "move it away or name another file with --history") from exc
    fresh = app_id == 0 and version == 0 and not tables
    if not fresh and app_id != APPLICATION_ID:
        shown = ", ".join(tables[:5]) + (" ..." if len(tables) > 5 else "")
        raise HistoryError(f"history {path} is a database of another program (application_id {app_id}, tables: "
                           f"{shown or 'none'}): it is left untouched; name another file with --history")
    if version > SCHEMA_VERSION:
        raise HistoryError(f"history {path} has schema version {version}, newer than this tunefleet's "
                           f"{SCHEMA_VERSION}: upgrade tunefleet (the file is left untouched)")
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _switch_to_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")  # durable at each checkpoint; WAL keeps it consistent
        db.execute("PRAGMA foreign_keys = ON")
        if version < SCHEMA_VERSION:
            _migrate(db)
    except sqlite3.OperationalError as exc:  # ours, but not writable here (read-only directory or file, a lock)
        raise HistoryUnavailable(f"history {path}: cannot write it here ({exc}); nothing was written") from exc
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"history {path}: cannot prepare it ({exc}); nothing was written") from exc


def _switch_to_wal(db: sqlite3.Connection) -> None:
    """WAL mode (readers never block the writer, nor it them). Switching needs the file to itself, and SQLite
    answers "database is locked" at once, without its busy handler, while another run holds it (runs that
    start together and race to create the file): retried for up to the busy timeout before it counts."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _migrate(db: sqlite3.Connection) -> None:
    """Apply the missing migrations in one transaction; re-read the version once the write lock is held,
    because another run may have migrated while this one waited."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[step].split(";"):
                if statement.strip():
                    db.execute(statement)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")

