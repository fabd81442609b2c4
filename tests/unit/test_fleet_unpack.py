"""The controller unpacks every node's report archive of a run in one process (verify.fleet.unpack), and
takes only what verify.noderun packs: a node's archive is not trusted by the controller."""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from verify.fleet.unpack import ARCHIVE, MAX_MEMBERS, NODE_FILES, main, unpack_run
from verify.noderun import archive_reports


def node_archive(tmp_path: Path, run: Path, host: str, files: dict) -> None:
    """<run>/<host>/reports.tar.gz exactly as the node writes it (noderun.archive_reports)."""
    report_dir = tmp_path / f"{host}-report"
    report_dir.mkdir(mode=0o700)
    for name, text in files.items():
        (report_dir / name).write_text(text)
    (run / host).mkdir(mode=0o700, parents=True, exist_ok=True)
    archive_reports(str(report_dir), str(run / host / ARCHIVE))


def crafted_archive(run: Path, host: str, add) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        add(tar)
    (run / host).mkdir(mode=0o700, parents=True)
    (run / host / ARCHIVE).write_bytes(buffer.getvalue())


def regular(tar, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_every_host_archive_is_unpacked_into_its_own_directory(tmp_path):
    run = tmp_path / "run"
    node_archive(tmp_path, run, "n1", {"report.json": '{"host": "n1"}', "report.md": "# n1"})
    node_archive(tmp_path, run, "n2", {"report.json": '{"host": "n2"}'})
    (run / "nccl-pairs").mkdir()  # a run directory that is not a host's: no archive, left alone
    (run / "lost").mkdir()  # a host whose fetch never came: no archive
    assert unpack_run(str(run)) == (2, {}, {})
    assert (run / "n1" / "report.json").read_text() == '{"host": "n1"}'
    assert (run / "n1" / "report.md").read_text() == "# n1"
    assert (run / "n2" / "report.json").read_text() == '{"host": "n2"}'
    assert os.stat(run / "n1" / "report.json").st_mode & 0o777 == 0o600
    assert sorted(os.listdir(run / "lost")) == []


def test_every_name_noderun_writes_is_taken():
    """NODE_FILES is the report writers' own table: a format added there is unpacked without a second list."""
    from verify.report import WRITERS

    assert {name for _module, name in WRITERS.values()} == NODE_FILES


def test_an_archive_with_a_link_a_path_or_a_hidden_name_is_refused_whole_naming_the_member(tmp_path):
    run = tmp_path / "run"
    outside = tmp_path / "outside"

    def link(tar):
        regular(tar, "report.json")
        info = tarfile.TarInfo("report.md")
        info.type, info.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(info)

    crafted_archive(run, "a", link)
    crafted_archive(run, "b", lambda tar: [regular(tar, "report.json"), regular(tar, "report.json")])
    crafted_archive(run, "c", lambda tar: regular(tar, "report.md"))
    crafted_archive(run, "d", lambda tar: [regular(tar, f"f{i}") for i in range(MAX_MEMBERS + 1)])
    (run / "e").mkdir()
    (run / "e" / ARCHIVE).write_bytes(b"not a tar.gz")
    done, refused, left_out = unpack_run(str(run))
    assert done == 0 and left_out == {}
    assert sorted(refused) == ["a", "b", "c", "d", "e"]
    assert "member 'report.md' is not a regular file" in refused["a"]
    assert "member 'report.json' appears twice" in refused["b"]
    assert "it holds no report.json" in refused["c"]
    assert f"more than {MAX_MEMBERS} members" in refused["d"]
    assert "not a readable gzip stream" in refused["e"]
    assert not (run / "a" / "report.json").exists(), "nothing of a refused archive is written"
    assert not outside.exists()


def test_names_a_node_never_writes_are_left_out_and_named(tmp_path):
    """A path, a hidden name, a long name (ENAMETOOLONG once ended the unpack) or a crossnode-*.json: never written,
    the node's own reports still taken."""
    run = tmp_path / "run"
    names = ["../../escape", ".hidden", "n" * 300, "crossnode-ib-fabric.json"]
    crafted_archive(run, "a", lambda tar: [regular(tar, "report.json", b"{}")] + [regular(tar, n) for n in names])
    done, refused, left_out = unpack_run(str(run))
    assert (done, refused) == (1, {})
    assert left_out["a"][:2] == ["../../escape", ".hidden"] and left_out["a"][3] == "crossnode-ib-fabric.json"
    assert sorted(os.listdir(run / "a")) == sorted([ARCHIVE, "report.json"])
    assert not (tmp_path / "escape").exists()


def test_the_archive_itself_is_read_never_through_a_link(tmp_path):
    run = tmp_path / "run"
    node_archive(tmp_path, tmp_path / "elsewhere", "n1", {"report.json": "{}"})
    (run / "n1").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere" / "n1" / ARCHIVE, run / "n1" / ARCHIVE)
    done, refused, _ = unpack_run(str(run))
    assert done == 0 and refused["n1"].startswith("not read: ")
    assert not (run / "n1" / "report.json").exists()


def test_the_command_the_play_runs_says_how_many_hosts_it_unpacked(tmp_path, capsys):
    run = tmp_path / "run"
    node_archive(tmp_path, run, "n1", {"report.json": "{}"})
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.strip() == "reports unpacked for 1 host(s)"
    assert main([]) == 2


def test_the_plays_cross_node_records_land_in_each_host_directory_that_exists(tmp_path):
    import json

    from verify.fleet.unpack import RECORDS, write_records

    run = tmp_path / "run"
    node_archive(tmp_path, run, "n1", {"report.json": "{}"})
    node_archive(tmp_path, run, "n2", {"report.json": "{}"})
    skip = [{"check_id": "fleet.rdma_pairwise", "status": "SKIP", "observed": "no RDMA device"}]
    (run / RECORDS).write_text(json.dumps({
        "crossnode-rdma.json": {"n1": skip, "n2": [], "lost": skip, "../n1": skip},
        "../../etc/passwd": {"n1": skip}}))
    written, refused = write_records(str(run))
    assert written == 1
    assert json.loads((run / "n1" / "crossnode-rdma.json").read_text()) == skip
    assert os.stat(run / "n1" / "crossnode-rdma.json").st_mode & 0o777 == 0o644
    assert not (run / "n2" / "crossnode-rdma.json").exists()  # no record kept for it
    assert not (run / "lost").exists()  # a host that never reported gets no directory
    assert refused == [f"{RECORDS}: '../../etc/passwd' is not a crossnode-NAME.json mapped to hosts"]
    assert write_records(str(tmp_path)) == (0, [])  # a run without records (no RDMA pairing)
