"""verify_unused_ports (roles/verify_node) reaches the desired state's verify.unused_ports, where health.ib
SKIPs the listed ports of a real faulty node's ibstat (tests/fixtures/node/health/public) instead of FAILing."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.test_checks_health_ib import run_on
from verify.desired import render_spec
from verify.result import Status

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "ibstat_faulty_gpud-h100-ib-cx6dx-eth-disabled.txt"


def test_the_default_lists_no_port_and_every_down_port_fails(tmp_path):
    spec = render_spec()
    assert spec["verify"]["unused_ports"] == []
    ports = run_on(tmp_path, FIXTURE, spec)
    assert sorted(p for p, r in ports.items() if r.status is Status.FAIL) == ["mlx5_2/1", "mlx5_7/1", "mlx5_8/1"]


def test_listed_ports_and_whole_hcas_are_skipped_through_the_rendered_desired_state(tmp_path):
    spec = render_spec({"verify_unused_ports": ["mlx5_2/1", "mlx5_7", "mlx5_8/1"]})
    assert spec["verify"]["unused_ports"] == ["mlx5_2/1", "mlx5_7", "mlx5_8/1"]
    ports = run_on(tmp_path, FIXTURE, spec)
    assert {p: r.status for p, r in ports.items() if r.status is not Status.PASS} == {
        "mlx5_2/1": Status.SKIP, "mlx5_7/1": Status.SKIP, "mlx5_8/1": Status.SKIP}


def test_the_role_declares_it():
    spec = yaml.safe_load((ROOT / "roles/verify_node/meta/argument_specs.yml").read_text())
    option = spec["argument_specs"]["main"]["options"]["verify_unused_ports"]
    defaults = yaml.safe_load((ROOT / "roles/verify_node/defaults/main.yml").read_text())
    assert option["type"] == "list" and option["elements"] == "str" and option["default"] == defaults[
        "verify_unused_ports"] == []
