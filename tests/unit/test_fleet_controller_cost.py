"""benchmarks/fleet_controller_cost.py: how it tells the controller's CPU from the nodes', its fit and its model."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet_controller_cost.py"
spec = importlib.util.spec_from_file_location("fleet_controller_cost", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # its dataclass looks its module up there
spec.loader.exec_module(bench)


def wrapper(work: Path) -> Path:
    (work / "records").mkdir()
    path = work / "shell-wrapper"
    path.write_text(bench.SHELL_WRAPPER.format(log_dir=work / "records"))
    path.chmod(0o700)
    return path


def as_ansible_runs_it(shell: Path, command: str, env=None) -> subprocess.CompletedProcess:
    """Popen(cmd, shell=True, executable=...) as the local connection does: argv is ['/bin/sh', '-c', cmd]."""
    return subprocess.run(command, shell=True, executable=str(shell), capture_output=True, text=True, env=env,
                          check=False)


def test_each_command_is_recorded_once_by_host_and_its_exit_code_kept(tmp_path):
    shell = wrapper(tmp_path)
    host = tmp_path / "hosts" / "node0007"
    host.mkdir(parents=True)
    # Ansible's command re-enters its own shell: only the outer one is recorded.
    inner = f"{shell} -c 'echo {host}/tmp/AnsiballZ_command.py; exit 3'"
    assert as_ansible_runs_it(shell, inner).returncode == 3
    assert as_ansible_runs_it(shell, "echo /root/.ansible/tmp/AnsiballZ_unarchive.py").returncode == 0
    records = sorted((tmp_path / "records").iterdir())
    assert sorted(p.name.rsplit(".", 1)[1] for p in records) == ["0", "3"]
    cpu, wall, commands, controller_cpu = bench.read_records(tmp_path / "records", tmp_path)
    assert commands == {"node0007": 1}  # the controller's own command is not a node's
    assert set(cpu) == set(wall) == {"node0007"}
    assert cpu["node0007"] >= 0 and wall["node0007"] > 0 and controller_cpu >= 0


def test_the_fit_is_the_least_squares_line_and_one_size_is_its_own_slope():
    assert bench.slope([(1, 13.0), (10, 31.0), (100, 211.0)]) == pytest.approx((2.0, 11.0))
    assert bench.slope([(4, 10.0)]) == (2.5, 0.0)


def test_the_estimate_adds_controller_and_node_time_and_bounds_it_by_the_larger():
    # 1000 hosts: the strategy's 0.3 s a host is more than 3.2 s over 16 cores; 4 batches of 250 forks.
    estimate, bound = bench.estimate_wall_s(1000, 10.0, 0.3, 3.2, 60.0, cores=16, forks=250)
    assert estimate == pytest.approx(10 + 300 + 240)
    assert bound == pytest.approx(10 + 300)
    estimate, bound = bench.estimate_wall_s(1000, 0.0, 0.1, 3.2, 60.0, cores=16, forks=100)
    assert estimate == pytest.approx(200 + 600) and bound == pytest.approx(600)


def test_every_host_of_the_inventory_reads_its_own_tree_as_this_machine_without_a_privilege_change(tmp_path):
    inventory = bench.inventory(tmp_path, 3)
    hosts = inventory["all"]["hosts"]
    assert sorted(hosts) == ["node0001", "node0002", "node0003"]
    assert hosts["node0002"]["verify_node_root"] == str(tmp_path / "hosts" / "node0002" / "tree")
    assert inventory["all"]["vars"]["ansible_connection"] == "local"
    assert inventory["all"]["vars"]["ansible_become"] is False


def test_sliced_the_strategy_splits_over_the_slices_up_to_the_cores_and_the_forks_add_up():
    # 10,000 hosts, 32 slices of 32 forks on 32 cores: the strategy's 0.36 s a host over 32 processes is less than
    # the forks' 1.39 s a host over 32 cores; 1,024 hosts at once, 10 batches; the join and fleet report after.
    estimate, bound = bench.estimate_wall_s(10000, 10.0, 0.36, 1.39, 40.0, cores=32, forks=32, slices=32,
                                            join_per_host=0.002)
    controller = 10000 * 1.39 / 32 + 10000 * 0.002
    assert estimate == pytest.approx(10 + controller + 10 * 40.0)
    assert bound == pytest.approx(10 + max(controller, 400.0))
    # More slices than cores: the strategy's share is divided by the cores, not the slices.
    estimate, _ = bench.estimate_wall_s(1000, 0.0, 1.0, 0.0, 0.0, cores=4, forks=1, slices=8)
    assert estimate == pytest.approx(1000 / 4)
    # One slice is the unsliced model.
    assert bench.estimate_wall_s(1000, 10.0, 0.3, 3.2, 60.0, cores=16, forks=250, slices=1) == \
        bench.estimate_wall_s(1000, 10.0, 0.3, 3.2, 60.0, cores=16, forks=250)
