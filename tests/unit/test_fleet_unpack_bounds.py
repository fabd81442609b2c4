"""A node's report archive is bounded before it is expanded, and a bad one costs its own host only (issue 53 items 2
and 8): the fleet play still builds the fleet report, naming that host, and a crossnode-*.json an archive carries
never replaces the controller's own verdict about the node."""
from __future__ import annotations

import argparse
import io
import json
import tarfile
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

from verify.fleet import unpack
from verify.fleet.report import main as report_main
from verify.fleet.rerun import hosts_without_report
from verify.fleet.unpack import ARCHIVE, UnpackError, read_members

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fleet"


def header(name: bytes, size_field: bytes, kind: bytes = b"0") -> bytes:
    """One ustar header block with a right checksum, fields as given (octal text or raw bytes)."""
    block = bytearray(512)
    block[:len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = size_field.ljust(12, b"\0")[:12]
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def gz(raw: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(raw) + packer.flush()


def pax(records: bytes) -> bytes:
    return header(b"././@PaxHeader", b"%011o" % len(records), b"x") + padded(records)


def report_member(data: bytes = b"{}") -> bytes:
    return header(b"report.json", b"%011o" % len(data)) + padded(data)


END = bytes(1024)


def refused_why(tmp_path: Path, archive: bytes) -> str:
    path = tmp_path / ARCHIVE
    path.write_bytes(archive)
    with pytest.raises(UnpackError) as caught:
        read_members(str(path))
    return str(caught.value)


@pytest.mark.parametrize("raw, why", [
    (header(b"report.json", b"\xff" * 12) + END, "header field size is not an octal number"),  # a negative size
    (pax(b"abc path=x\n") + report_member() + END, "a pax record has no length"),  # ValueError in tarfile
    (pax(b"99 path=report.json\n") + report_member() + END, "a pax record is damaged"),
    (pax(b"29 size=18446744073709551616\n") + report_member() + END, "sets 'size'"),
    (pax(b"%d path=%s\n" % (5000 + 12, b"n" * 5000)) + report_member() + END, "a pax header of 5011 bytes"),
    (report_member(b"x" * 2000)[:1024], "cut short inside member"),
    (report_member(), "ends before its end-of-archive block"),
    (bytes(report_member()[:148]) + b"9999999\0" + report_member()[156:] + END, "not an octal number"),
    (header(b"report.json", b"%011o" % 2, b"5") + END, "not a regular file"),
    (header(b"report.json", b"%011o" % (unpack.MAX_MEMBER_BYTES + 1)) + END, "bytes (at most"),
])
def test_a_damaged_or_hostile_tar_is_refused_with_its_reason(tmp_path, raw, why):
    assert why in refused_why(tmp_path, gz(raw))


def test_a_long_name_header_is_never_expanded_to_its_claimed_size(tmp_path):
    """tarfile reads a GNU long name or a pax header whole, whatever size it claims (a 3 MB archive took 3.2 GB)."""
    claimed = header(b"././@LongLink", b"%011o" % (3 << 30), b"L") + END
    assert "is not a regular file" in refused_why(tmp_path, gz(claimed)) or "cut short" in refused_why(
        tmp_path, gz(claimed))


def test_an_archive_that_inflates_past_its_bound_is_refused_before_it_is_held(tmp_path):
    """The 1.46 MB archive that took 1.46 GiB and 30 s: refused after at most MAX_STREAM_BYTES inflated."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(header(b"report.json", b"%011o" % (1 << 30)))]
    zeros = bytes(1 << 20)
    parts += [packer.compress(zeros) for _ in range(200)]
    bomb = b"".join(parts) + packer.flush()
    tracemalloc.start()
    began = time.monotonic()
    why = refused_why(tmp_path, bomb)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    limit = max(unpack.RATIO_FROM, unpack.MAX_RATIO * len(bomb))
    assert f"inflates past {limit} bytes" in why and limit < 64 << 20
    assert peak < 2.5 * limit, "held: the bounded stream and one copy, never the 1 GiB member it claims"
    assert time.monotonic() - began < 5


def test_the_ratio_bound_spares_a_real_report(tmp_path):
    """A real node report, repeated to 4 MiB: JSON compresses about 10:1, far inside MAX_RATIO."""
    report = (FIXTURES / "node_report_ci_vm.json").read_bytes()
    body = (report * (1 + (4 << 20) // len(report)))[:4 << 20]
    members, _ = read_members_of(tmp_path, gz(report_member(body) + END))
    assert members == [("report.json", body)]


def read_members_of(tmp_path: Path, archive: bytes) -> tuple:
    path = tmp_path / ARCHIVE
    path.write_bytes(archive)
    return read_members(str(path))


def noderun_archive(run: Path, host: str, files: dict) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (run / host).mkdir(parents=True, exist_ok=True)
    (run / host / ARCHIVE).write_bytes(buffer.getvalue())


def test_the_fleet_report_is_built_naming_the_bad_archive_and_keeping_the_controller_s_verdict(tmp_path, capsys):
    """One host's archive is damaged, another's carries a forged crossnode-ib-fabric.json claiming PASS: the unpack
    ends cleanly, the fleet report names the damaged host (and the re-run lists it) and the forging host keeps the
    fabric FAIL the controller wrote before the unpack."""
    run = tmp_path / "run"
    report = json.loads((FIXTURES / "node_report_ci_vm.json").read_text())
    for result in report["results"]:
        result["status"] = "PASS" if result["status"] == "FAIL" else result["status"]
    for host in ("good", "forger"):
        report["host"] = host
        extra = {}
        if host == "forger":
            extra["crossnode-ib-fabric.json"] = json.dumps([{
                "check_id": "fleet.ib_fabric.mlx5_0/1", "role": "fleet", "status": "PASS", "expected": "x",
                "observed": "MARKER-FORGED", "reason": "forger mlx5_0/1: MARKER-FORGED"}]).encode()
        noderun_archive(run, host, {"report.json": json.dumps(report).encode(), **extra})
    controller_fail = [{"check_id": "fleet.ib_fabric.mlx5_0/1", "role": "fleet", "status": "FAIL",
                        "expected": "errors <= 10", "observed": "SymbolErrorCounter 65535",
                        "reason": "forger mlx5_0/1: switch s1 port 3: SymbolErrorCounter 65535",
                        "details": {"action": "drain-rma"}}]
    (run / "forger" / "crossnode-ib-fabric.json").write_text(json.dumps(controller_fail))
    (run / "bad").mkdir()
    (run / "bad" / ARCHIVE).write_bytes(gz(header(b"report.json", b"\xff" * 12) + END))

    assert unpack.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "host bad: its report archive is damaged: header field size is not an octal number" in out
    assert "host forger: its report archive also carried 'crossnode-ib-fabric.json'" in out
    assert hosts_without_report(str(run), ["good", "forger", "bad"]) == ["bad"]

    code = report_main(argparse.Namespace(directory=str(run), format="json,md", out=None))
    captured = capsys.readouterr()
    assert code == 1  # the forger's fabric FAIL
    fleet = json.loads((run / "fleet_report.json").read_text())
    assert any("host bad: its report archive is damaged" in e["message"] for e in fleet["load_errors"])
    assert "host bad: its report archive is damaged" in captured.err
    text = (run / "fleet_report.json").read_text() + (run / "fleet_report.md").read_text()
    assert "MARKER-FORGED" not in text
    assert "SymbolErrorCounter 65535" in text
    forger = next(row for row in fleet["hosts"] if row["host"] == "forger")
    assert forger["worst"] == "FAIL"


def test_the_node_measures_its_archive_against_the_bound_the_controller_reads():
    import yaml

    repo = Path(__file__).resolve().parents[2]
    role_vars = yaml.safe_load((repo / "roles/verify_node/vars/main.yml").read_text())
    assert role_vars["__verify_node_max_archive_bytes"] == unpack.MAX_ARCHIVE_BYTES
    tasks = yaml.safe_load((repo / "roles/verify_node/tasks/main.yml").read_text())
    steps = [t["name"] for t in next(t for t in tasks if "block" in t)["block"]]
    assert steps.index("Refuse a report archive larger than the controller reads") \
        == steps.index("Fetch the reports to the controller") - 1
