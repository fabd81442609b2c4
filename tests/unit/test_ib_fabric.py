"""The fabric side of the IB links (issue 36 item 3): `ibqueryerrors` read from a real published output
(tests/fixtures/node/health/public/README.md cites it), joined to the hosts of a fleet run through each node
report's ib_ports, judged by health_ib's one judge, and shown on the host the switch port faces."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from verify.checks import health_ib
from verify.facts import ib_fabric
from verify.fleet import ib_fabric as fleet_fabric
from verify.fleet import model
from verify.judging import verdicts
from verify.result import Status

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO / "tests" / "fixtures" / "node" / "health" / "public"
REAL = (PUBLIC / "ibqueryerrors_faulty_linux-rdma-20210316-sx6036.txt").read_text()
UCX = (PUBLIC / "ibqueryerrors_faulty_ucx9590-port-all-extended-fragment.txt").read_text()
NODE_REPORT = json.loads((REPO / "tests" / "fixtures" / "fleet" / "node_report_ci_vm.json").read_text())
SWITCH = "MF0;ys23ib4:SX6036/U1"
# The real capture has no -r: one `Link info` line in rdma-core's print_port_config format (ibqueryerrors.c)
# is placed after switch port 5, its far end the capture's own rd240 HCA port 1 (LIDs and speed are
# placeholders; no public `ibqueryerrors -r` output with a Link info line was found).
LINK_TO_RD240 = ('       Link info:      3    5[  ] ==( 4X           14.0625 Gbps Active/  LinkUp)==>  '
                 '0xe41d2d0300e0bae1      7    1[  ] "rd240 mlx4_0" ( )')
# The hosts of the capture, as their node reports would name their HCA ports (GUIDs and node descriptions
# from the capture; the rest of each report is the real CI VM report).
HOSTS = {
    "rd240": [("mlx4_0/1", "0xe41d2d0300e0bae1", "rd240 mlx4_0"), ("mlx4_0/2", "0xe41d2d0300e0bae2", "rd240 mlx4_0")],
    "dl380g7": [("mlx4_0/1", "0x7cfe900300179b31", "dl380g7 mlx4_0"),
                ("mlx4_0/2", "0x7cfe900300179b32", "dl380g7 mlx4_0")],
    "server": [("mlx4_0/1", "0x0002c9030042dff1", "server mlx4_0")],
}


def with_link(text: str) -> str:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("   GUID 0x2c903006e29b0 port 5:"))
    return "\n".join(lines[:at + 1] + [LINK_TO_RD240] + lines[at + 1:]) + "\n"


def run_dir(tmp_path, name="20261127T230000Z-aaaa") -> Path:
    directory = tmp_path / "reports" / name
    for host, ports in HOSTS.items():
        report = json.loads(json.dumps(NODE_REPORT))
        report["host"] = report["facts"]["host"] = host
        report["facts"]["ib_ports"] = [{"port": p, "port_guid": g, "node_guid": None, "node_desc": d}
                                       for p, g, d in ports]
        (directory / host).mkdir(parents=True)
        (directory / host / "report.json").write_text(json.dumps(report))
    directory.chmod(0o700)
    return directory


def fleet_results(directory: Path) -> dict:
    nodes, errors = model.load_fleet_dir(str(directory))
    assert not errors
    return {n.host: {r.check_id: r for r in n.results if r.check_id.startswith("fleet.ib_fabric")} for n in nodes}


def test_the_real_capture_is_read_port_by_port_with_its_summary():
    fabric = ib_fabric.parse_ibqueryerrors(REAL)
    assert fabric.complete and (fabric.nodes_checked, fabric.ports_checked, fabric.bad_ports) == (4, 43, 14)
    by_key = {p.key: p for p in fabric.ports}
    port5 = by_key["0x0002c903006e29b0/5"]
    assert port5.switch and port5.node_name == SWITCH and port5.node_guid == 0x2c903006e29b0
    assert port5.counters == {"symbol_error": 65535, "link_error_recovery": 8, "link_downed": 2,
                              "port_rcv_switch_relay_errors": 149, "port_xmit_discards": 649}
    assert port5.other == {"PortXmitWait": 84704351}  # congestion ticks, never an error
    assert by_key["0x0002c903006e29b0/ALL"].port is None
    rd240 = by_key["0xe41d2d0300e0bae1/1"]
    assert not rd240.switch and rd240.node_name == "rd240 mlx4_0" and rd240.counters == {}
    assert fabric.unreadable_lines == 0 and not fabric.why_unreadable


def test_a_port_line_without_its_node_header_is_counted_unreadable_never_attributed():
    fabric = ib_fabric.parse_ibqueryerrors(UCX)  # one extended-counter line as posted, its header not shown
    assert fabric.ports == [] and fabric.unreadable_lines == 1 and not fabric.complete
    headed = ib_fabric.parse_ibqueryerrors('Errors for 0x1070fd0300370ea2 "sw"\n' + UCX)
    assert headed.ports[0].counters == {"link_downed": 25, "port_rcv_errors": 26, "port_xmit_discards": 2846}


def test_text_that_is_no_ibqueryerrors_output_is_said_unreadable():
    assert ib_fabric.parse_ibqueryerrors("ibwarn: [1] mad_rpc_open_port: can't open UMAD port\n").why_unreadable
    assert ib_fabric.parse_ibqueryerrors("GUID 0x" + "9" * 5000 + " port 1: [SymbolErrorCounter == 1]").ports == []


NOW = 1_800_000_000.0 + 86400  # the clock the reading times are held to: never the machine's


def test_guids_from_the_tools_sysfs_and_gids_meet():
    assert ib_fabric.guid_key("0xe41d2d0300e0bae1") == ib_fabric.guid_key("e41d:2d03:00e0:bae1") \
        == ib_fabric.guid_key("fe80:0000:0000:0000:e41d:2d03:00e0:bae1") == 0xe41d2d0300e0bae1
    assert ib_fabric.guid_key("0x0000000000000000") is None and ib_fabric.guid_key("0x" + "f" * 17) is None


def test_a_switch_port_with_symbol_errors_is_shown_on_the_host_it_faces(tmp_path):
    directory = run_dir(tmp_path)
    fleet_fabric.collect(str(directory), with_link(REAL), read_at=1_800_000_000.0, now=NOW)
    results = fleet_results(directory)
    faced = results["rd240"]["fleet.ib_fabric.mlx4_0/1"]
    assert faced.status is Status.FAIL and faced.details[verdicts.ACTION_KEY] == verdicts.DRAIN_RMA
    assert faced.reason.startswith(f"rd240 mlx4_0/1: switch {SWITCH} (0x0002c903006e29b0) port 5 facing mlx4_0/1: "
                                   "link_downed 2 since the counters were last cleared, ")
    assert "symbol_error 65535 since the counters were last cleared (saturated: at least this many)" in faced.reason
    assert "port_xmit_discards 649 since the counters were last cleared (congestion or filtering, not the cable)" \
        in faced.reason
    assert faced.remediation.startswith(f"drain rd240; reseat or replace the cable / transceiver between switch "
                                        f"{SWITCH} (0x0002c903006e29b0) port 5 and rd240 mlx4_0/1")
    assert faced.details["switch_port"] == {"switch": SWITCH, "switch_guid": "0x0002c903006e29b0", "port": 5}
    assert faced.details["thresholds"]["errors"] == health_ib.DERIVED_ERRORS.to_dict()  # one home
    from verify.fleet.summary import build_summary

    rows = {row.host: row for row in build_summary(*model.load_fleet_dir(str(directory))).rows}
    assert rows["rd240"].worst == "FAIL" and rows["rd240"].problems[0].check_id == "fleet.ib_fabric.mlx4_0/1"
    # the capture's other hosts: only PortXmitWait / VL15Dropped on their ports, no error a cable causes
    assert results["rd240"]["fleet.ib_fabric.mlx4_0/2"].status is Status.PASS
    assert {r.status for r in results["dl380g7"].values()} == {Status.PASS}
    assert results["server"]["fleet.ib_fabric.mlx4_0/1"].status is Status.PASS


def test_without_link_info_switch_ports_are_listed_unjoined_and_no_host_is_blamed_or_cleared(tmp_path):
    directory = run_dir(tmp_path)
    summary = fleet_fabric.collect(str(directory), REAL, read_at=1_800_000_000.0, now=NOW)
    results = [r for per in fleet_results(directory).values() for r in per.values()]
    assert {r.status for r in results} == {Status.ERROR}  # could not check: never FAIL, never PASS
    assert "the switch port it faces is not named: 8 switch ports with errors that name no far end" in results[0].reason
    assert sorted(p["port"] for p in summary["unjoined"]) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert summary["note"] == fleet_fabric.WITHOUT_LINKS


def test_counters_since_an_earlier_reading_are_judged_as_rates(tmp_path):
    earlier = run_dir(tmp_path, "20261127T220000Z-aaaa")
    port5 = "port 5: [SymbolErrorCounter == 65535] [LinkErrorRecoveryCounter == 8] [LinkDownedCounter == {}]"
    fleet_fabric.collect(str(earlier), with_link(REAL).replace(port5.format(2), port5.format(1)),
                         read_at=1_800_000_000.0, now=NOW)
    later = run_dir(tmp_path)
    fleet_fabric.collect(str(later), with_link(REAL), read_at=1_800_000_000.0 + 3600, now=NOW)
    faced = fleet_results(later)["rd240"]["fleet.ib_fabric.mlx4_0/1"]
    assert faced.status is Status.FAIL  # one flap in an hour: above one per 6 hours
    assert "link_downed 1 in 60.0 min" in faced.reason
    assert "symbol_error" not in faced.reason  # saturated then and now: no increase judged
    assert faced.details["interval_min"] == 60.0


def test_a_capture_cut_before_its_summary_never_passes_a_host(tmp_path):
    directory = run_dir(tmp_path)
    cut = REAL.split("## Summary")[0]
    fleet_fabric.collect(str(directory), cut, read_at=1_800_000_000.0, now=NOW)
    assert {r.status for r in fleet_results(directory)["server"].values()} == {Status.ERROR}


def test_the_fabric_check_is_opt_in_and_off_by_default():
    defaults = yaml.safe_load((REPO / "roles/verify_node/defaults/main.yml").read_text())
    assert defaults["verify_node_ib_fabric"] is False
    plays = yaml.safe_load((REPO / "playbooks/verify.yml").read_text())
    tasks = [t for play in plays if isinstance(play, dict) for t in play.get("tasks", [])]
    block = next(t for t in tasks if t.get("name") == "Judge the fabric side of the IB links")
    assert block["when"] == "verify_node_ib_fabric | bool"
    assert any("verify.fleet.ib_fabric" in str(t.get("ansible.builtin.command", "")) for t in block["block"])


def test_ib_fabric_without_an_inventory_is_refused(capsys):
    from verify.cli import main

    assert main(["verify", "--local", "--ib-fabric", str(PUBLIC / "ibqueryerrors_faulty_ucx9590-port-all-extended-"
                                                                   "fragment.txt")]) == 2
    assert "--ib-fabric joins the fabric to a fleet run" in capsys.readouterr().err


def test_a_fleet_run_with_ib_fabric_turns_the_check_on_with_the_file(tmp_path):
    import argparse

    from verify.fleet.run import Progress, runner_kwargs

    args = argparse.Namespace(inventory=str(tmp_path / "inv"), limit=None, profile=None, ib_fabric="capture.txt")
    extra = runner_kwargs(args, REPO, tmp_path / "run", str(tmp_path), Progress(lambda _: None))["extravars"]
    assert extra["verify_node_ib_fabric"] is True and extra["verify_node_ib_fabric_input"].endswith("/capture.txt")


def test_ibdiagnet_stage_table_is_read_from_the_last_table():
    # The table's layout as ibdiagnet prints it (NVIDIA ibdiagnet User Manual); no complete public run with
    # its summary was found, so this is the documented form, not a capture.
    text = ("Summary\n-I- Stage                     Warnings   Errors     Comment\n"
            "-I- Discovery                 3          0\n-I- Port Counters             2          1\n\n"
            "-I- You can find detailed errors/warnings in: /var/tmp/ibdiagnet2/ibdiagnet2.log\n")
    stages = ib_fabric.parse_ibdiagnet_summary(text)
    assert [(s.stage, s.warnings, s.errors) for s in stages] == [("Discovery", 3, 0), ("Port Counters", 2, 1)]
    assert ib_fabric.parse_ibdiagnet_summary("-I- Discovery 3 0\n") == []  # no table header: no table


def test_a_nodes_hca_ports_are_named_as_the_fabric_names_them(tmp_path):
    from tests.helpers.fake_node import FakeTree

    # mlx5_0 of the real ibstat capture ibstat_healthy_gpud-h100-ib-cx7-bond.txt (Node GUID = Port GUID
    # 0x58a2e10300a7820e), written as sysfs prints them: node_guid in 4-digit groups, the port GUID as GID 0's
    # low 64 bits (drivers/infiniband/core/sysfs.c); the node description as rdma-ndd sets it.
    base = "/sys/class/infiniband/mlx5_0"
    tree = (FakeTree(tmp_path).write(f"{base}/node_guid", "58a2:e103:00a7:820e\n")
            .write(f"{base}/node_desc", "gpu-node-07 mlx5_0\n")
            .write(f"{base}/ports/1/gids/0", "fe80:0000:0000:0000:58a2:e103:00a7:820e\n"))
    ports = ib_fabric.port_identities(tree.node())
    assert ports == [{"port": "mlx5_0/1", "port_guid": "0x58a2e10300a7820e", "node_guid": "0x58a2e10300a7820e",
                      "node_desc": "gpu-node-07 mlx5_0"}]
    assert ib_fabric.ports_from_facts(ports)[0]["port_guid"] == 0x58a2e10300a7820e
    assert ib_fabric.ports_from_facts([{"port": 3}, "x", {"port": "a/1", "port_guid": "0x" + "9" * 99}]) == [
        {"port": "a/1", "port_guid": None, "node_guid": None, "node_desc": ""}]


def test_a_capture_that_could_not_be_had_is_said_on_every_host_and_the_run_goes_on(tmp_path):
    directory = run_dir(tmp_path)
    code = fleet_fabric.main(["collect", f"--run-dir={directory}", "--input=unused",
                              "--tool-failed=fabhost: exit 255: ibwarn: mad_rpc_open_port: can't open UMAD port"])
    assert code == 1
    rows = [r for per in fleet_results(directory).values() for r in per.values()]
    assert {r.status for r in rows} == {Status.ERROR} and len(rows) == 3
    assert "ibqueryerrors could not read the fabric: fabhost: exit 255: ibwarn" in rows[0].reason


def test_a_capture_another_user_can_change_is_refused_on_every_host(tmp_path):
    directory = run_dir(tmp_path)
    capture = tmp_path / "capture.txt"
    capture.write_text(with_link(REAL))
    capture.chmod(0o666)  # writable by others: never trusted to decide a drain
    assert fleet_fabric.main(["collect", f"--run-dir={directory}", f"--input={capture}"]) == 1
    rows = [r for per in fleet_results(directory).values() for r in per.values()]
    assert {r.status for r in rows} == {Status.ERROR} and f"--input {capture}" in rows[0].reason


def test_an_ibdiagnet_stage_table_given_with_the_capture_is_kept_in_the_run_summary(tmp_path):
    directory = run_dir(tmp_path)
    table = "-I- Stage                     Warnings   Errors     Comment\n-I- Port Counters             2          1\n"
    fleet_fabric.collect(str(directory), with_link(REAL), 1_800_000_000.0, ibdiagnet=table)
    kept = json.loads((directory / "ib-fabric" / "summary.json").read_text())["ibdiagnet"]
    assert kept == [{"stage": "Port Counters", "warnings": 2, "errors": 1, "comment": ""}]


@pytest.mark.parametrize("earlier_at, read_at", [
    (1e300, 1_800_000_000.0),             # an earlier reading dated far in the future
    (10 ** 400, 1_800_000_000.0),         # too large for a float: OverflowError ended the collection
    ("1799996400", 1_800_000_000.0),      # text
    (1.0, 1_800_000_000.0),               # 1970: a rate over 57 years
    (1_800_000_000.0 - 90 * 86400, 1_800_000_000.0),  # 90 days: past MAX_INTERVAL_S
    (1_800_000_000.0 - 3600, NOW + 7200),  # this reading dated in the future
])
def test_an_implausible_reading_time_judges_counts_never_a_weaker_rate(tmp_path, earlier_at, read_at):
    """65,535 symbol errors on a switch port: a FAIL as a count since cleared. A time that would make the interval
    huge (or unknown) never turns it into a small rate that passes."""
    earlier = run_dir(tmp_path, "20261127T220000Z-aaaa")
    (earlier / fleet_fabric.FABRIC_DIR).mkdir()
    raw = json.dumps({"read_at": 0, "complete": True, "ports": {}}).replace("0,", "%s," % (
        json.dumps(earlier_at) if not isinstance(earlier_at, int) else str(earlier_at)), 1)
    (earlier / fleet_fabric.FABRIC_DIR / fleet_fabric.READING_NAME).write_text(raw)
    later = run_dir(tmp_path)
    summary = fleet_fabric.collect(str(later), with_link(REAL), read_at=read_at, now=NOW)
    faced = fleet_results(later)["rd240"]["fleet.ib_fabric.mlx4_0/1"]
    assert faced.status is Status.FAIL
    assert "symbol_error 65535 since the counters were last cleared" in faced.reason
    assert "counters judged as counts since they were last cleared" in summary["interval_unknown"]


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e300", "9" * 400, "yesterday", "0"])
def test_read_at_is_a_unix_time_up_to_now_or_refused_naming_it(tmp_path, capsys, value):
    directory = run_dir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        fleet_fabric.main(["collect", f"--run-dir={directory}", f"--input={tmp_path}/none", f"--read-at={value}"])
    assert ended.value.code == 2
    assert "--read-at" in capsys.readouterr().err
    assert not (directory / "rd240" / fleet_fabric.CROSSNODE_NAME).exists()
