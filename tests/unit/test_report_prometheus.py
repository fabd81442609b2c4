"""The Prometheus textfile: statuses and every measured figure in base units with its labels, checked by the
real promtool and scraped from the real prometheus-node-exporter (Debian packages) on loopback."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.unit.test_scheduler_modes import Machine
from verify.judging.peaks import Peak, pcie_gbps
from verify.judging.thresholds import Threshold
from verify.report import build_report, prometheus
from verify.result import CheckResult, Status

BENCH_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "h200_storage_cufile_compat.json"


def h2d_result() -> CheckResult:
    """H2D on the 1x H100 (docs: ENVIRONMENT, 55.2 GB/s) against the floor 0.7 x PCIe Gen5 x16."""
    peak = Peak(pcie_gbps(5, 16), "PCIe Gen5 x16")
    return CheckResult("bench.h2d.gpu0", "bench", Status.PASS, None, 55.2, "H2D 55.2 GB/s",
                       details={"unit": "GB/s", "bus_id": "00000000:00:06.0", "physical_peak": peak.to_dict(),
                                "threshold": Threshold(limit=0.7 * peak.gbps, kind="min").to_dict()})


@pytest.fixture
def text(tmp_path) -> str:
    """A health run over the H100 capture (GPU readings) plus benchmark figures, as a scheduler mode writes it."""
    outcome = Machine(tmp_path).run("health", "healthy")
    results = [CheckResult.from_dict(r) for r in outcome.report["results"]]
    results += [CheckResult.from_dict(r) for r in json.loads(BENCH_FIXTURE.read_text())] + [h2d_result()]
    report = build_report(outcome.report["desired_state"], outcome.report["facts"], results, outcome.report["run"])
    report["run"]["gpu_uuids"] = {"00000000:00:06.0": "GPU-5e0c7f53-0000-0000-0000-000000000000"}
    return prometheus.render(report, mode="health")


def samples(text: str) -> dict:
    parser = pytest.importorskip("prometheus_client.parser")
    found = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_every_figure_is_a_gauge_in_base_units_with_its_labels(text):
    found = samples(text)
    gpu = {"gpu": "0", "pci_bus_id": "0000:00:06.0", "uuid": "GPU-5e0c7f53-0000-0000-0000-000000000000",
           "mode": "health"}
    assert found["tunefleet_bandwidth_bytes_per_second"].count((dict(gpu, check="bench.h2d.gpu0"), 55.2e9)) == 1
    floor, = [v for labels, v in found["tunefleet_bandwidth_floor_bytes_per_second"]
              if labels["check"] == "bench.h2d.gpu0"]
    peak, = [v for labels, v in found["tunefleet_bandwidth_peak_bytes_per_second"]
             if labels["check"] == "bench.h2d.gpu0"]
    # the report keeps the peak to 3 decimals of GB/s
    assert peak == pytest.approx(pcie_gbps(5, 16) * 1e9, rel=1e-5) and floor == pytest.approx(0.7 * peak, rel=1e-5)
    assert ({"check": "bench.storage.odirect", "mode": "health"}, 1.469e9) in \
        found["tunefleet_bandwidth_bytes_per_second"]  # the captured H200 figure, no GPU label
    assert (dict(gpu, check="health.gpu.clocks.0"), 39.0) in found["tunefleet_gpu_temperature_celsius"]
    assert (dict(gpu, check="health.gpu.clocks.0"), 127.0) in found["tunefleet_gpu_power_watts"]
    assert (dict(gpu, check="health.gpu.clocks.0"), 5.0) in found["tunefleet_gpu_tlimit_headroom_floor_celsius"]
    assert found["tunefleet_last_run_timestamp_seconds"][0][0] == {"mode": "health"}
    assert found["tunefleet_last_run_timestamp_seconds"][0][1] > time.time() - 3600


def test_ib_ports_carry_hca_and_port_labels(tmp_path):
    machine = Machine(tmp_path)
    drills.plant_ib_ports_down(machine.tree.root)
    outcome = machine.run("health", "healthy")
    found = samples(prometheus.render(outcome.report, mode="health"))
    rates = {(labels["hca"], labels["port"]): value for labels, value in
             found["tunefleet_ib_port_rate_bytes_per_second"]}
    assert rates[("mlx5_0", "1")] == 400e9 / 8


def test_promtool_finds_the_file_clean(text):
    if not shutil.which("promtool"):
        pytest.skip("needs Debian's prometheus package (promtool)")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_real_node_exporter_serves_the_figures(tmp_path, text):
    exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if not exporter:
        pytest.skip("needs Debian's prometheus-node-exporter package")
    directory = tmp_path / "textfile"
    directory.mkdir()
    (directory / "tunefleet_health.prom").write_text(text)
    port = _free_port()
    proc = subprocess.Popen([exporter, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.textfile", f"--collector.textfile.directory={directory}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                    body = answer.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        assert 'node_textfile_scrape_error 0' in body
        assert ('tunefleet_bandwidth_bytes_per_second{check="bench.h2d.gpu0",gpu="0",mode="health",'
                'pci_bus_id="0000:00:06.0",uuid="GPU-5e0c7f53-0000-0000-0000-000000000000"} 5.52e+10') in body
        assert 'tunefleet_last_run_timestamp_seconds{mode="health"}' in body
    finally:
        proc.terminate()
        proc.wait(timeout=15)
