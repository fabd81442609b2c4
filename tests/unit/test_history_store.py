"""The history database: made private, versioned and migrated, atomic, safe with concurrent writers,
and a foreign, newer, damaged or linked file refused by name and left byte for byte as it was."""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verify.history.store import (
    APPLICATION_ID,
    COUNTERS_BODY_LIMIT,
    MIGRATIONS,
    SCHEMA_VERSION,
    HistoryError,
    Measurement,
    RunRecord,
    default_path,
    open_store,
)

REPO = Path(__file__).resolve().parents[2]


def run(host="gpu-01", key="r1", h2d=55.4, started="2026-11-22T00:00:00+00:00", config=None) -> RunRecord:
    return RunRecord(host=host, started_at=started, source="local", run_key=key, worst="PASS", exit_code=0,
                     measurements=[Measurement("bench.h2d.gpu0", "PASS", h2d, "GB/s")],
                     config=config if config is not None else {"sysctl.vm.swappiness": "0"})


def test_a_new_history_is_private_versioned_and_in_wal_mode(tmp_path):
    path = tmp_path / "state" / "history.sqlite"
    with open_store(str(path)) as store:
        assert store.record(run()) is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_default_path_root_user_and_override():
    assert default_path({}, 0) == "/var/lib/tunefleet/history.sqlite"
    assert default_path({"XDG_DATA_HOME": "/home/a/.data"}, 1000) == "/home/a/.data/tunefleet/history.sqlite"
    assert default_path({"HOME": "/home/b"}, 1000).endswith("/.local/share/tunefleet/history.sqlite")
    assert default_path({"TUNEFLEET_HISTORY": "/srv/h.sqlite"}, 0) == "/srv/h.sqlite"


def test_a_version_1_history_is_migrated_in_place_and_keeps_its_runs(tmp_path):
    path = tmp_path / "history.sqlite"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0])
    db.execute("INSERT INTO hosts (name) VALUES ('gpu-01')")
    db.execute("INSERT INTO runs (host_id, started_at, source, run_key, worst, exit_code) "
               "VALUES (1, '2026-01-01T00:00:00+00:00', 'local', 'old', 'PASS', 0)")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with open_store(str(path)) as store:
        assert [r.started_at for r in store.past_runs("gpu-01", 5)] == ["2026-01-01T00:00:00+00:00"]
        store.record(run(key="new", config={"sysctl.vm.swappiness": "60"}))
        newest = store.past_runs("gpu-01", 5)[0]
        assert newest.config == {"sysctl.vm.swappiness": "60"}  # the column migration 2 added
    migrated = sqlite3.connect(path)
    assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert migrated.execute("SELECT count(*) FROM acks").fetchone()[0] == 0  # the table migration 3 added
    assert migrated.execute("SELECT count(*) FROM counters").fetchone()[0] == 0  # the table migration 4 added


def test_a_run_keeps_its_counters_bounded_and_the_next_run_reads_the_last_runs_only(tmp_path):
    nvlink = {"0": {"CRC Errors": 3, "Replay Errors": 0}}
    too_big = {str(link): {f"Counter {n}": 0 for n in range(40)} for link in range(18)}
    depth = {"health.nvlink.0": 2, "health.nvlink.1": 2, "health.ib.mlx5_0/1": 1}.get
    with open_store(str(tmp_path / "h.sqlite")) as store:
        assert store.last_counters("gpu-01", depth) == {}  # no run yet
        first = run(key="r1")
        first.counters = {"health.nvlink.0": nvlink, "health.nvlink.1": too_big, "health.ib.mlx5_0/1": {"x": 1}}
        store.record(first)
        assert store.last_counters("gpu-01", depth) == {"health.nvlink.0": nvlink, "health.ib.mlx5_0/1": {"x": 1}}
        assert store.last_counters("gpu-01", {"health.nvlink.0": 2}.get) == {"health.nvlink.0": nvlink}
        store.record(run(key="r2", started="2026-11-23T00:00:00+00:00"))  # read nothing: no earlier reading
        assert store.last_counters("gpu-01", depth) == {}
        assert store.last_counters("gpu-02", depth) == {} and store.warnings == []
    assert len(json.dumps(too_big, separators=(",", ":"))) > COUNTERS_BODY_LIMIT


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def test_a_database_of_another_program_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
    db.execute("INSERT INTO invoices (amount) VALUES (12.5)")
    db.commit()
    db.close()
    before = _bytes(path)
    with pytest.raises(HistoryError, match=r"another program .*invoices.*left untouched"):
        open_store(str(path))
    assert _bytes(path) == before and not Path(f"{path}-wal").exists()


@pytest.mark.parametrize("content", [b"this is not a database\n" * 50, b"SQLite format 3\x00" + b"\xff" * 200])
def test_a_damaged_or_non_sqlite_file_is_refused_and_left_untouched(tmp_path, content):
    path = tmp_path / "history.sqlite"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=str(path)):
        open_store(str(path))
    assert _bytes(path) == content


def test_a_history_from_a_newer_tunefleet_is_refused(tmp_path):
    path = tmp_path / "history.sqlite"
    with open_store(str(path)):
        pass
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(HistoryError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        open_store(str(path))


def test_a_symlink_or_a_directory_others_can_write_is_refused(tmp_path):
    target = tmp_path / "elsewhere.sqlite"
    target.write_bytes(b"")
    link = tmp_path / "history.sqlite"
    link.symlink_to(target)
    with pytest.raises(HistoryError, match="symlink"):
        open_store(str(link))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, not sticky: anyone could swap the file
    with pytest.raises(HistoryError, match="cannot be used safely"):
        open_store(str(shared / "history.sqlite"))
    assert not (shared / "history.sqlite").exists()


def test_an_append_that_fails_half_way_leaves_nothing(tmp_path):
    with open_store(str(tmp_path / "h.sqlite")) as store:
        broken = run(key="broken")
        broken.measurements.append(Measurement("bench.d2h.gpu0", None, 1.0))  # NOT NULL status: fails after the run row
        with pytest.raises(HistoryError):
            store.record(broken)
        assert store.past_runs("gpu-01", 5) == []
        assert store.record(run(key="ok")) is not None
        assert store.record(run(key="ok")) is None  # the same run twice is kept once
        assert len(store.past_runs("gpu-01", 5)) == 1


WRITER = textwrap.dedent("""
    import sys
    from verify.history.store import Measurement, RunRecord, open_store
    path, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(count):
        with open_store(path) as store:  # a fresh open each time: the way separate verify runs append
            store.record(RunRecord(host=f"host-{i % 3}", started_at=f"2026-11-22T00:00:{i:02d}+00:00",
                                   source="local", run_key=f"{who}-{i}", worst="PASS", exit_code=0,
                                   measurements=[Measurement("bench.h2d.gpu0", "PASS", 50.0 + i)],
                                   config={"who": who}))
""")


def test_concurrent_runs_append_without_losing_or_refusing_any(tmp_path):
    path = str(tmp_path / "h.sqlite")  # not created yet: the writers race to create and migrate it too
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, path, f"w{n}", "25"], cwd=REPO,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
               for n in range(4)]
    errors = [(w.wait(timeout=120), w.stderr.read()) for w in writers]
    assert all(code == 0 for code, _ in errors), errors
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 100
    assert db.execute("SELECT count(*) FROM measurements").fetchone()[0] == 100
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_missing_history_is_not_created_when_only_read(tmp_path):
    with pytest.raises(HistoryError, match="does not exist"):
        open_store(str(tmp_path / "none.sqlite"), create=False)
    assert not (tmp_path / "none.sqlite").exists()
