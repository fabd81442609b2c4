"""Every parser is total: fed random text and broken copies of the real captured outputs, it returns
its result or raises its module's documented parse error, never anything else, never hangs, and no
garbage ever judges PASS.

Hypothesis runs with a fixed seed and a bounded number of examples here (profile "ci"); `make fuzz`
runs the "fuzz" profile (random seed, many more examples) and prints what it found.
`test_every_parser_is_fuzzed` fails when a parse_*/load_*/read_* function in verify/ or plugins/
is neither in PARSERS nor in EXEMPT (with its reason), so a new parser cannot skip this.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import math
import signal
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))  # the collection link `make venv` creates
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import (  # noqa: E402
    kernel_rules,
    ledger_core,
    preflight_checks,
)

from plugins import load_plugin  # noqa: E402
from verify import (  # noqa: E402
    bounded_load,
    desired,
    engine,
    node,
    pci_config,  # noqa: E402
    profiles,
)
from verify.bench import common, dcgm_parse, gds_parse, nccl_parse, perftest, perftest_parse  # noqa: E402
from verify.checks import common as checks_common  # noqa: E402
from verify.checks import conflicts, ethtool_params, limits, nccl_conf, path_mtu, peermem  # noqa: E402
from verify.facts import (  # noqa: E402
    aer,
    dcgm_health,
    dcgmi_nvlink,
    fabric,
    gpu_processes,
    gpu_query,
    health_smi,
    ib_counters,
    ib_fabric,
    kernel_log,
    links,
    nccl_settings,
    node_facts,
    pci_path,
    peer_access,
    smi_q,
    smi_table,
    versions,
)
from verify.fleet import baseline, baseline_rules, fix_plan, model, unpack  # noqa: E402
from verify.fleet import ib_fabric as fleet_ib_fabric  # noqa: E402
from verify.history import drain, window  # noqa: E402
from verify.judging import thresholds  # noqa: E402
from verify.result import Status  # noqa: E402
from verify.scheduler import kernel_events, nvml  # noqa: E402
from verify.scheduler import policy as scheduler_policy  # noqa: E402
from verify.scheduler import state as scheduler_state  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
HANG_S = 10  # one call longer than this is a hang (a 5000-digit number through a backtracking regex)


def _fixture(*names: str) -> list:
    return [(FIXTURES / n).read_bytes() for n in names]


def _captured(pattern: str) -> list:
    """stdout of the captured commands under node/commands that printed something."""
    outputs = [json.loads(p.read_text())["stdout"] for p in sorted((FIXTURES / "node/commands").glob(pattern))]
    return [o.encode() for o in outputs if "statistics" in o or "=" in o]


@dataclass
class Parser:
    """One parser: how to call it on fuzzed bytes, the errors its module documents, real inputs."""

    name: str  # module:function, as the discovery test finds it
    call: Callable[[bytes], object]
    errors: tuple
    fixtures: list = field(default_factory=list)
    # Given the result, the figure that would be judged PASS (checked never to be garbage), if any.
    verdict: Callable[[object], None] = lambda result: None


def text(data: bytes) -> str:
    """What a parser of captured output sees: tools' output decoded with errors="replace"."""
    return data.decode("utf-8", errors="replace")


def in_tree(relative: str, call: Callable[[node.Node], object]) -> Callable[[bytes], object]:
    """Write the bytes to one file of a fake node tree and call with the real Node over it."""

    def run(data: bytes) -> object:
        with tempfile.TemporaryDirectory(prefix="tf-fuzz-") as root:
            target = Path(root, relative.lstrip("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            return call(node.Node(root=root, live=False))

    return run


def _report_archive() -> bytes:
    """A node's reports.tar.gz as roles/verify_node fetches it: the captured CI VM report in it."""
    data = (FIXTURES / "fleet" / "node_report_ci_vm.json").read_bytes()
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        member = tarfile.TarInfo("report.json")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return packed.getvalue()


def as_file(suffix: str, call: Callable[[str], object]) -> Callable[[bytes], object]:
    def run(data: bytes) -> object:
        with tempfile.TemporaryDirectory(prefix="tf-fuzz-") as root:
            path = Path(root, "input" + suffix)
            path.write_bytes(data)
            return call(str(path))

    return run


def in_root(relative: str, call: Callable[[str], object]) -> Callable[[bytes], object]:
    """Like in_tree, for plugins that take a root path instead of a Node."""

    def run(data: bytes) -> object:
        with tempfile.TemporaryDirectory(prefix="tf-fuzz-") as root:
            target = Path(root, relative.lstrip("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            return call(root)

    return run


def never_garbage_pass(result) -> None:
    if result.status == Status.PASS:
        assert thresholds.broken_measurement(result.observed) is None, result.reason


# ---- the judged paths: the real parse + judge, with the tool's output replaced ---------------------

PORT = perftest.Port("mlx5_0", 1, 400.0, "InfiniBand", "4: ACTIVE")


def perftest_judged(data: bytes):
    parsed = perftest_parse.parse_text(text(data))
    threshold = perftest.bw_threshold(None, None, PORT, False)
    result = perftest.judge("bench.rdma.mlx5_0.write_bw", parsed, PORT, "write_bw", threshold, None)
    never_garbage_pass(result)
    unknown = perftest.judge("bench.rdma.mlx5_0.write_bw", parsed, PORT, "write_bw", None, None)
    never_garbage_pass(unknown)
    return result


def nccl_judged(data: bytes):
    """The largest size's busbw through Threshold.judge, as the all-reduce check reads it."""
    run = nccl_parse.parse_nccl_tests(text(data))
    for point in run.points:
        status, _ = thresholds.Threshold(limit=1.0).judge(point.busbw_gbps)
        if status == Status.PASS:
            assert thresholds.broken_measurement(point.busbw_gbps) is None
    return run


def gdsio_judged(data: bytes):
    runs = gds_parse.parse_gdsio(text(data))
    for run in runs:
        status, _ = thresholds.Threshold(limit=0.001).judge(run.throughput_gbps)
        if status == Status.PASS:
            assert thresholds.broken_measurement(run.throughput_gbps) is None
    return runs


def _plugin(kind: str, name: str):
    return load_plugin(kind, name)


kernel_values = _plugin("modules", "kernel_values")
gpu_node = _plugin("module_utils", "gpu_node")
nic_info = _plugin("module_utils", "nics")
node_reads = _plugin("module_utils", "node_reads")
reboot_marker = _plugin("modules", "reboot_marker")
memory_hugepages = _plugin("modules", "memory_hugepages")
memory_filter = _plugin("filter", "memory")


CI_TREE = "node/snapshots/ci_vm/tree"
LEDGER = "/var/lib/tunefleet/ledger.json"
SPEC = json.loads((FIXTURES / "node" / "desired_state.json").read_text())

PARSERS = [
    # operator input and fabric times (issues 49, 53): refused with the option named, never raised otherwise
    Parser("verify.fleet.fix_plan:parse_age", lambda d: fix_plan.parse_age(text(d)), (ValueError,),
           [b"24h", b"90m", b"2d", b"3600"]),
    Parser("verify.fleet.ib_fabric:_read_at", lambda d: fleet_ib_fabric._read_at(text(d)),
           (argparse.ArgumentTypeError,), [b"1796600000", b"1796600000.5"]),
    Parser("verify.fleet.ib_fabric:reading_time", lambda d: fleet_ib_fabric.reading_time(text(d), 1796600000.0), (),
           [b"1796600000", b"0", b"inf"]),
    # verify.node: ReadError (a ValueError)
    Parser("verify.node:parse_cpulist", lambda d: node.parse_cpulist(text(d)), (node.ReadError,),
           [b"0-3,8,10-11", b"0-63:1/2", b"0"]),  # the kernel's stride is A-B:N/GROUP ("0-63:2" is EINVAL)
    Parser("verify.facts.node_facts:_memory_kib", in_tree("/proc/meminfo", node_facts._memory_kib), (node.ReadError,),
           _fixture(f"{CI_TREE}/proc/meminfo")),
    Parser("verify.facts.node_facts:_os_release", in_tree("/etc/os-release", node_facts._os_release), (),
           _fixture(f"{CI_TREE}/etc/os-release")),
    Parser("verify.facts.node_facts:_cpu", in_tree("/proc/cpuinfo", node_facts._cpu), (node.ReadError,),
           _fixture(f"{CI_TREE}/proc/cpuinfo")),
    Parser("verify.facts.node_facts:_cpu/online", in_tree("/sys/devices/system/cpu/online", node_facts._cpu),
           (node.ReadError,),
           [b"0-3\n", b"0-127\n"]),
    Parser("verify.node:Node.read_int", in_tree("/proc/sys/fs/nr_open", lambda n: n.read_int("/proc/sys/fs/nr_open")),
           (node.ReadError,), _fixture(f"{CI_TREE}/proc/sys/fs/nr_open")),
    Parser("verify.facts.node_facts:gather_facts", in_tree("/proc/meminfo", node_facts.gather_facts), (),
           _fixture(f"{CI_TREE}/proc/meminfo")),
    # verify.bench: each parser module's own error
    Parser("verify.bench.nccl_parse:parse_nccl_tests", nccl_judged, (nccl_parse.NcclParseError,),
           _fixture("bench/h200x2_all_reduce_perf_system_nccl.stdout",
                    "bench/h200x2_all_reduce_perf_torch_nccl.stdout")),
    Parser("verify.bench.nccl_parse:parse_nccl_debug", lambda d: nccl_parse.parse_nccl_debug(text(d)),
           (nccl_parse.NcclParseError,), _fixture("bench/h200x2_run1.log", "bench/h200x2_run2.log")),
    Parser("verify.facts.health_smi:parse", lambda d: health_smi.parse(text(d)), (health_smi.HealthParseError,),
           _fixture("node/health/h200_query-gpu_idle_590.48.01.csv", "node/health/h200_query-gpu_load_590.48.01.csv")),
    Parser("verify.facts.kernel_log:parse_xids", lambda d: kernel_log.parse_xids(text(d)), (),
           _fixture("node/health/kernel_log_xid79_48_documented.txt",
                    "node/health/kernel_log_xid62_154_forum_595.71.05.txt")),
    Parser("verify.facts.kernel_log:xid_events", lambda d: _xid_events_bounded(text(d)), (),
           _fixture("node/health/public/kernel-log_faulty_ogkm1030-xid31-caller-column-590.48.01.txt",
                    "node/health/public/kernel-log_faulty_gpud-xid119-xe9680.txt",
                    "node/health/public/kernel-log_faulty_nvsentinel-xid74-link14.txt")),
    Parser("verify.checks.health_ib:parse_rate", lambda d: _rate_bounded(text(d)), (),
           [b"400 Gb/sec (4X NDR)\n", b"100 Gb/sec (4X EDR)", b"53.125 Gb/sec (2X HDR)"]),
    Parser("verify.facts.ib_counters:parse_perfquery", lambda d: ib_counters.parse_perfquery(text(d)), (),
           _fixture("node/health/public/perfquery-x_faulty_ibexporter-switch-linkdowned-discards.txt",
                    "node/health/public/perfquery-x_healthy_ibexporter-hca-lid133.txt")),
    Parser("verify.facts.ib_fabric:parse_ibqueryerrors", lambda d: ib_fabric.parse_ibqueryerrors(text(d)), (),
           _fixture("node/health/public/ibqueryerrors_faulty_linux-rdma-20210316-sx6036.txt",
                    "node/health/public/ibqueryerrors_faulty_ucx9590-port-all-extended-fragment.txt")),
    Parser("verify.facts.ib_fabric:parse_ibdiagnet_summary", lambda d: ib_fabric.parse_ibdiagnet_summary(text(d)), (),
           [b"-I- Stage                     Warnings   Errors     Comment\n-I- Discovery                 3          0\n"
            b"-I- Port Counters             2          1\n"]),  # the documented layout: no public capture found
    Parser("verify.facts.ib_fabric:ports_from_facts",
           lambda d: ib_fabric.ports_from_facts(bounded_load.loads_json_bounded(text(d), "ib_ports")),
           (bounded_load.BoundedLoadError,),
           [b'[{"port": "mlx4_0/1", "port_guid": "0xe41d2d0300e0bae1", "node_guid": null, '
            b'"node_desc": "rd240 mlx4_0"}]']),
    Parser("verify.facts.dcgmi_nvlink:parse_dcgmi_link_status",
           lambda d: dcgmi_nvlink.parse_dcgmi_link_status(text(d)), (),
           _fixture("node/health/public/dcgmi-nvlink-s_faulty_dcgm198-h100nvl-all-down-3.3.7.txt",
                    "node/health/public/dcgmi-nvlink-s_healthy_dcgm-exporter576-h100x8-570.124.06.txt",
                    "node/health/public/dcgmi-nvlink-s_healthy_llm-action-h800x8-8links.txt")),
    Parser("verify.facts.dcgmi_nvlink:parse_dcgmi_nvlink_errors",
           lambda d: dcgmi_nvlink.parse_dcgmi_nvlink_errors(text(d)), (),
           _fixture("node/health/public/dcgmi-nvlink-e_healthy_llm-action-h800-gpu1.txt")),
    Parser("verify.facts.smi_q:parse", lambda d: [smi_q.health_fields(g) for g in smi_q.parse(text(d))], (),
           _fixture("node/health/public/nvidia-smi-q_faulty_gpud-a10-remap-pending-535.129.03.txt",
                    "node/health/h200x2/cmd/nvidia-smi-q.stdout")),
    # issue 46: nvidia-smi's output in whatever form it holds (-q, the default table, CSV), and DCGM's health report
    Parser("verify.facts.health_smi:read_any", lambda d: health_smi.read_any(text(d), "nvidia-smi"), (),
           _fixture("node/health/public/nvidia-smi_healthy_nvidia-docker759-m40x2-390.48.txt",
                    "node/health/public/nvidia-smi_faulty_azhpc-diagnostics77-v100-power-err.txt",
                    "node/health/public/nvidia-smi_faulty_ogkm387-device-handle-unknown-error-520.61.05.txt",
                    "node/health/h200_query-gpu_idle_590.48.01.csv")),
    Parser("verify.facts.smi_table:parse", lambda d: smi_table.parse(text(d)), (),
           _fixture("node/health/public/nvidia-smi_healthy_nvidia-docker759-m40x2-390.48.txt",
                    "node/health/public/nvidia-smi_faulty_azhpc-diagnostics77-v100-power-err.txt")),
    Parser("verify.facts.fabric:parse_manager_log", lambda d: fabric.parse_manager_log(text(d)), (),
           _fixture("node/health/public/fabricmanager-log_faulty_gpud-log-examples.txt")),
    Parser("verify.facts.dcgm_health:parse", lambda d: dcgm_health.parse(text(d)), (),
           _fixture("node/health/public/dcgmi-health-c_faulty_dcgm-docs-pcie-replays-built.txt",
                    "node/health/public/dcgmi-health-c_healthy_dcgm-format-built.txt")),
    Parser("verify.facts.kernel_log:parse_lost", lambda d: kernel_log.parse_lost(text(d)), (),
           _fixture("node/health/kernel_log_fallen_off_bus_probe_source.txt",
                    "node/health/kernel_log_xid79_48_documented.txt")),
    # issue 46: the one kernel-record reader (every wrapper), the driver's non-Xid failures, PCIe AER
    Parser("verify.facts.kernel_log:read_records", lambda d: _records_bounded(text(d)), (),
           _fixture("node/health/public/kernel-log_healthy_ogkm446-talos-dmesg-gsp-trace.txt",
                    "node/health/public/kernel-log_faulty_gpuop1146-rminitadapter-syslog-kernel-stamp.txt",
                    "node/health/public/kernel-log_faulty_returnn1500-aer-fatal-sdes-cmpltto-reltime.txt",
                    "node/health/h200x2/cmd/journalctl-k.stdout")),
    Parser("verify.facts.kernel_log:driver_faults", lambda d: kernel_log.driver_faults(text(d)), (),
           _fixture("node/health/public/kernel-log_faulty_ogkm1230-gsp-timeout-banner-then-init-failed-595.71.05.txt",
                    "node/health/public/kernel-log_faulty_sichek51-reset-required-no-bus.txt")),
    Parser("verify.facts.aer:aer_events", lambda d: aer.aer_events(kernel_log.kernel_records(text(d))), (),
           _fixture("node/health/public/kernel-log_faulty_returnn1500-aer-fatal-sdes-cmpltto-reltime.txt",
                    "node/health/public/kernel-log_healthy_popos3363-aer-corrected-root-port-journal.txt")),
    Parser("verify.facts.aer:parse_counters", lambda d: aer.parse_counters(text(d)), (),
           _fixture("node/health/aer_sysfs/aer_dev_fatal.sdes-cmpltto",
                    "node/health/aer_sysfs/aer_dev_correctable.zero")),
    Parser("verify.facts.links:parse_nvlink_status", lambda d: links.parse_nvlink_status(text(d)),
           (links.LinkParseError,), _fixture("node/gpu_machine/nvidia-smi-nvlink-status.txt")),
    Parser("verify.bench.perftest_parse:parse_text", perftest_judged, (perftest_parse.PerftestParseError,),
           _fixture("bench/perftest_ib_write_bw_sweep_issue132.txt", "bench/perftest_ib_write_bw_gbits_issue273.txt",
                    "bench/perftest_ib_read_lat_roce_spiderpool.txt")),
    Parser("verify.bench.perftest_parse:parse_json", lambda d: perftest_parse.parse_json(text(d)),
           (perftest_parse.PerftestParseError,), _fixture("bench/perftest_ib_write_lat_json_issue216.json")),
    Parser("verify.facts.links:parse_port_rate", lambda d: links.parse_port_rate(text(d)), (),
           [b"400 Gb/sec (4X NDR)\n", b"100 Gb/sec (4X EDR)"]),
    Parser("verify.facts.links:discover_ports",
           in_root("/sys/class/infiniband/mlx5_0/ports/1/rate", links.discover_ports), (),
           [b"400 Gb/sec (4X NDR)\n"]),
    Parser("verify.bench.gds_parse:parse_gdsio", gdsio_judged, (gds_parse.GdsParseError,),
           _fixture("bench/gdsio_gpud_write_issue78.txt", "bench/gdsio_cpuonly_read_nvidia_docs.txt")),
    Parser("verify.bench.gds_parse:parse_gdscheck", lambda d: gds_parse.parse_gdscheck(text(d)),
           (gds_parse.GdsParseError,), _fixture("bench/gdscheck_h200_issue75_excerpt.txt")),
    Parser("verify.bench.dcgm_parse:parse", lambda d: dcgm_parse.parse(text(d)), (dcgm_parse.DcgmParseError,),
           _fixture("bench/dcgmi_diag_j_8gpu_dcgm3.1.0_nvidia_test.txt",
                    "bench/dcgmi_diag_j_dcgm4_schema_shaped.json",
                    "node/health/public/dcgmi-diag-table_faulty_go-dcgm52-gpu-memory-fail-gpu0-partial.txt",
                    "node/health/public/dcgmi-diag-table_faulty_dcgm49-pcie-fail-all-partial-2.4.6.txt")),
    Parser("verify.bench.dcgm_parse:parse_table", lambda d: dcgm_parse.parse_table(text(d)),
           (dcgm_parse.DcgmParseError,),
           _fixture("node/health/public/dcgmi-diag-table_faulty_go-dcgm52-gpu-memory-fail-gpu0-partial.txt",
                    "node/health/public/dcgmi-diag-table_faulty_dcgm49-pcie-fail-all-partial-2.4.6.txt",
                    "node/health/public/dcgmi-diag-table_healthy_go-dcgm52-gpu1-header-partial-3.3.1.txt")),
    Parser("verify.facts.links:parse_nvlink_gpu_names", lambda d: links.parse_nvlink_gpu_names(text(d)), (),
           _fixture("node/health/public/nvlink-s_faulty_azhpc-diagnostics73-v100-2inactive.txt",
                    "node/health/h200x2/cmd/nvlink-s.stdout")),
    Parser("verify.facts.links:parse_nvlink_all_inactive", lambda d: links.parse_nvlink_all_inactive(text(d)), (),
           _fixture("node/health/public/nvlink-s_faulty_azurehpc-hc-a100-all-inactive.txt")),
    Parser("verify.facts.links:parse_bandwidth_notices", lambda d: links.parse_bandwidth_notices(text(d)), (),
           _fixture("node/health/public/kernel-log_faulty_linux-surface374-pcie-bw-limited-gpu-x4.txt",
                    "node/health/public/kernel-log_faulty_l2fwd-nv6-pcie-bw-limited-mlx5-x8.txt")),
    Parser("verify.engine:read_result", lambda d: engine.read_result(text(d)), (),
           _fixture("bench/h200x2_hostcopy.stdout", "bench/h200x2_odirect_qd1.stdout")),
    Parser("verify.bench.common:parse_size", lambda d: common.parse_size(text(d)), (ValueError,),
           [b"4096", b"1M", b"4G", b"512MiB"]),
    Parser("verify.history.window:parse_window", lambda d: window.parse_window(text(d)), (ValueError,),
           [b"..2026-12-01", b"2026-12-01..", b"2026-11-01T06:00:00+02:00..2026-12-01Z", b"20261201T0600Z-ab12"]),
    Parser("verify.facts.hardware:read_pcie",
           in_tree("/sys/bus/pci/devices/0000:18:00.0/current_link_speed", lambda n: _pcie(n)), (ValueError,),
           [b"32.0 GT/s PCIe\n", b"16.0 GT/s PCIe\n"]),
    # verify.checks: ValueError naming the file or line (run_one turns anything into an ERROR row)
    Parser("verify.checks.common:bracketed_choice", lambda d: checks_common.bracketed_choice(text(d)), (ValueError,),
           _fixture(f"{CI_TREE}/sys/kernel/mm/transparent_hugepage/enabled", "preflight/vda_scheduler")),
    Parser("verify.checks.conflicts:parse_sysctl_conf", lambda d: conflicts.parse_sysctl_conf(text(d), "x.conf"),
           (ValueError,), _fixture("conflicts/debian12_sysctl.conf", "conflicts/systemd_50-default.conf")),
    Parser("verify.checks.conflicts:connected_subnets", lambda d: conflicts.connected_subnets(text(d)),
           (ValueError,), _fixture("conflicts/proc_net_route_two_rails", "conflicts/proc_net_route_vm")),
    Parser("verify.checks.conflicts:judge_swap", lambda d: conflicts.judge_swap(text(d), 60), (ValueError,),
           _fixture("conflicts/proc_swaps_none", "conflicts/proc_swaps_one_file")),
    Parser("verify.checks.ethtool_params:parse_sections",
           lambda d: ethtool_params.parse_sections(text(d), ethtool_params.RING_KEYS), (ValueError,),
           _fixture("sysfs_net/ethtool_g_virtio_net.txt")),
    Parser("verify.facts.gpu_query:parse_smi_csv", lambda d: gpu_query.parse_smi_csv(text(d)), (ValueError,),
           _fixture("node/nvidia-smi/nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01.csv",
                    "node/nvidia-smi/nvidia-smi_query-gpu_l40s_595.80.csv")),
    Parser("verify.facts.gpu_query:parse_driver_banner", lambda d: gpu_query.parse_driver_banner(text(d)),
           (ValueError,), [b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  Mon Dec  1 2025\n"]),
    Parser("verify.checks.limits:parse_limits_lines", lambda d: limits.parse_limits_lines(text(d)), (ValueError,),
           _fixture("node/etc/limits.conf.debian12")),
    Parser("verify.checks.limits:parse_systemd_conf", lambda d: limits.parse_systemd_conf([text(d)]), (ValueError,),
           _fixture("node/etc/system.conf.debian12")),
    Parser("verify.checks.limits:parse_systemctl_show", lambda d: limits.parse_systemctl_show(text(d)),
           (ValueError,), _captured("systemctl_show_*.json")),
    Parser("verify.checks.limits:parse_probe", lambda d: limits.parse_probe(text(d)), (ValueError,),
           [json.loads((FIXTURES / "node/commands/su_nobody_ulimits.json").read_text())["stdout"].encode()]),
    Parser("verify.checks.nccl_conf:parse_nccl_conf", lambda d: nccl_conf.parse_nccl_conf(text(d)), (ValueError,),
           [b"NCCL_IB_HCA=mlx5\n# comment\nNCCL_SOCKET_IFNAME=eth0\n"]),
    Parser("verify.facts.nccl_settings:parse_nccl_conf", lambda d: nccl_settings.parse_nccl_conf(text(d)),
           (nccl_settings.NcclConfParseError,),
           [b"NCCL_NVLS_ENABLE=0\nTORCH_SYMM_MEM_DISABLE_MULTICAST=1\nNVSHMEM_DISABLE_NVLS=1\nNCCL_P2P_DISABLE=1\n"]),
    Parser("verify.facts.gpu_processes:parse_compute_apps", lambda d: gpu_processes.parse_compute_apps(text(d)),
           (gpu_processes.AppsParseError,),
           _fixture("node/gpu_processes/h200x4-busy-job.csv", "node/gpu_processes/h200x4-idle.csv")),
    Parser("verify.checks.path_mtu:parse_ping", lambda d: path_mtu.parse_ping(text(d), text(d)), (ValueError,),
           _captured("ping_*.json")),
    Parser("verify.checks.peermem:kernel_version", lambda d: peermem.kernel_version(text(d)), (ValueError,),
           _fixture(f"{CI_TREE}/proc/sys/kernel/osrelease")),
    Parser("verify.facts.versions:parse_nccl_header", lambda d: versions.parse_nccl_header(text(d)), (ValueError,),
           [b"#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n"]),
    Parser("verify.facts.versions:cuda_runtime",
           in_tree("/usr/local/cuda/version.json", lambda n: versions.cuda_runtime(n, [])), (ValueError,),
           [b'{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}']),
    Parser("verify.checks:run_checks", in_tree("/proc/meminfo", lambda n: _all_checks(n)), (),
           _fixture(f"{CI_TREE}/proc/meminfo")),
    # user files: one error each, naming the file
    Parser("verify.desired:load_spec_file", as_file(".json", desired.load_spec_file), (desired.SpecError,),
           _fixture("node/desired_state.json", "node/gpu_machine_desired.json")),
    Parser("verify.desired:load_vars_file", as_file(".yml", desired.load_vars_file), (desired.SpecError,),
           [(REPO / "inventory/local/group_vars/all.yml").read_bytes()]),
    Parser("verify.profiles:validate_profile",
           lambda d: profiles.validate_profile(bounded_load.loads_json_bounded(text(d), "profile"), "fuzzed.json"),
           (profiles.ProfileError, bounded_load.BoundedLoadError),
           [p.read_bytes() for p in sorted((REPO / "verify/profiles").glob("*.json"))]),
    Parser("verify.bounded_load:load_yaml_bounded", as_file(".yml", bounded_load.load_yaml_bounded),
           (bounded_load.BoundedLoadError,), [(REPO / "inventory/local/group_vars/all.yml").read_bytes()]),
    Parser("verify.bounded_load:load_json_bounded", as_file(".json", bounded_load.load_json_bounded),
           (bounded_load.BoundedLoadError,), _fixture("node/desired_state.json")),
    Parser("verify.fleet.model:parse_node_report",
           lambda d: model.parse_node_report(model.json_loads(d), "fuzzed.json", "h1"), (ValueError,),
           _fixture("fleet/node_report_ci_vm.json", "node/gpu_machine_report.json")),
    Parser("verify.fleet.unpack:read_members", as_file(".tar.gz", unpack.read_members), (unpack.UnpackError,),
           [_report_archive()]),
    Parser("verify.fleet.baseline_rules:load_rules", as_file(".yml", baseline_rules.load_rules),
           (baseline_rules.RulesError,), _fixture("fleet/baseline_rules.yml")),
    Parser("verify.fleet.baseline:load", as_file(".json", baseline.load), (baseline.BaselineError,),
           _fixture("fleet/fleet_baseline_h200x2_h100x1.json")),
    Parser("verify.fleet.model:parse_crossnode", lambda d: model.parse_crossnode(model.json_loads(d)), (ValueError,),
           _fixture("fleet/crossnode_allreduce_gloo_2node.json")),
    Parser("verify.fleet.model:load_fleet_dir", in_root("/h1/report.json", lambda r: _fleet_report(r)), (),
           _fixture("fleet/node_report_ci_vm.json", "node/gpu_machine_report.json")),
    # plugins: each module's own error (fail_json with it, never a traceback)
    Parser("plugins.module_utils.kernel_rules:parse_pam_limits", lambda d: kernel_rules.parse_pam_limits(text(d)), (),
           _fixture("node/etc/limits.conf.debian12")),
    Parser("plugins.module_utils.kernel_rules:parse_systemd_limits",
           lambda d: kernel_rules.parse_systemd_limits([text(d)]), (), _fixture("node/etc/system.conf.debian12")),
    Parser("verify.history.drain:parse_cap", lambda d: drain.parse_cap(text(d)), (ValueError,), [b"10%", b"3", b"0"]),
    Parser("verify.scheduler.kernel_events:parse_kmsg_record", lambda d: kernel_events.parse_kmsg_record(d), (),
           [b"6,339,5140900,-;NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
            b"the bus.\n SUBSYSTEM=pci\n", b"4,1,0,-;usb 1-1: new device\n"]),
    Parser("verify.scheduler.kernel_events:passed_over", lambda d: kernel_events.passed_over(d, 5.0), (),
           [b"6,339,5140900,-;NVRM: Xid (PCI:0000:00:06): 79\n", b"12,99,5,-;x\n"]),
    Parser("verify.scheduler.state:parse", lambda d: scheduler_state.parse(text(d)), (ValueError,),
           [b'{"schema": "tunefleet.scheduler_state/v1", "boot_id": "x", "kernel_uptime_s": 1.5, "open_events": []}']),
    Parser("verify.facts.fabric:parse_smi_fabric", lambda d: fabric.parse_smi_fabric(text(d)),
           (fabric.FabricParseError,),
           _fixture("node/pcie/h100sxm8-nvidia-smi-q.txt", "node/pcie/a100sxm-fabric-in-progress.txt")),
    Parser("verify.facts.fabric:parse_manager_version", lambda d: fabric.parse_manager_version(text(d)), (),
           [b"Fabric Manager version is : 535.129.03\n"]),
    Parser("verify.facts.peer_access:parse_p2p_matrix", lambda d: peer_access.parse_p2p_matrix(text(d)),
           (peer_access.P2pParseError,),
           _fixture("node/peer_access/rtx5090x2-p2p-gns.stdout", "node/peer_access/gpux5-p2p-p-ok.stdout",
                    "node/peer_access/h200x4-topo-p2p-r.stdout")),
    Parser("verify.facts.peer_access:parse_topo_gpu_links", lambda d: peer_access.parse_topo_gpu_links(text(d)),
           (peer_access.TopoParseError,),
           _fixture("node/health/h200x2/cmd/topo-m.stdout", "node/peer_access/h100x1-topo-m.stdout")),
    Parser("verify.facts.pci_path:parse_acs", lambda d: pci_path.parse_acs(d), (pci_config.PciConfigError,),
           [bytes(4096), bytes(256)]),
    Parser("verify.facts.pci_path:parse_cmdline", lambda d: pci_path.parse_cmdline(text(d)), (),
           [b"BOOT_IMAGE=/vmlinuz-6.8 root=/dev/sda1 ro iommu=pt intel_iommu=on\n"]),
    Parser("plugins.module_utils.kernel_rules:parse_cpulist", lambda d: kernel_rules.parse_cpulist(text(d)),
           (kernel_rules.KernelRuleError,), [b"0-3,8,10-11", b"0-7:1/2\n"]),
    Parser("plugins.module_utils.kernel_rules:parse_choices", lambda d: kernel_rules.parse_choices(text(d)), (),
           _fixture("preflight/vda_scheduler", "preflight/thp_enabled")),
    Parser("plugins.modules.kernel_values:current_value",
           lambda d: kernel_values.current_value("/sys/block/vda/queue/scheduler", text(d)), (),
           _fixture("preflight/vda_scheduler")),
    Parser("plugins.modules.kernel_values:current_value/thp",
           lambda d: kernel_values.current_value("/sys/kernel/mm/transparent_hugepage/enabled", text(d)), (),
           _fixture("preflight/thp_enabled", "preflight/thp_defrag")),
    Parser("plugins.module_utils.gpu_node:parse_query", lambda d: gpu_node.parse_query(text(d)),
           (gpu_node.PersistenceError,),
           _fixture("role_gpu/nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01.csv",
                    "role_gpu/nvidia-smi_query-gpu_l40s_595.80.csv")),
    Parser("plugins.module_utils.nics:parse_networkd_file", lambda d: nic_info.parse_networkd_file(text(d)), (),
           _fixture("sysfs_net/networkctl_status_managed.txt", "sysfs_net/networkctl_status_unmanaged.txt")),
    Parser("plugins.module_utils.nics:netplan_defines", lambda d: nic_info.netplan_defines(text(d)), (),
           _fixture("sysfs_net/netplan_get_defined.txt", "sysfs_net/netplan_get_undefined.txt")),
    Parser("plugins.module_utils.nics:read_nic", in_root("/class/net/eth0/mtu", lambda r: nic_info.read_nic(r, "eth0")),
           (), [b"1500\n", b"9000\n"]),
    Parser("plugins.module_utils.node_reads:read_node",
           in_root("/proc/sys/fs/nr_open", lambda r: node_reads.read_node(
               r, {}, ["limits", "cpu", "memory"], lambda name: None, lambda name: False, lambda argv: (1, "", ""))),
           (), [b"1048576\n", b"-1\n", b"\xff\x00"]),
    Parser("plugins.modules.memory_hugepages:default_page_kb", in_root("/meminfo", memory_hugepages.default_page_kb),
           (), _fixture(f"{CI_TREE}/proc/meminfo")),
    Parser("plugins.modules.memory_hugepages:_read_int", as_file("", memory_hugepages._read_int), (), [b"1024\n"]),
    Parser("plugins.modules.reboot_marker:parse_marker", lambda d: reboot_marker.parse_marker(text(d)), (),
           [b'{"reasons": ["memory: 1 GiB huge pages"], "boot_id": "b1"}\n', b"[1]", b'{"boot_id": 3}']),
    Parser("plugins.modules.reboot_marker:read_marker",
           in_root("/var/lib/tunefleet/reboot-required",
                   lambda r: reboot_marker.read_marker(r, "/var/lib/tunefleet/reboot-required")), (),
           [b'{"reasons": ["x"], "boot_id": "b1"}\n', b"\xff\xfe"]),
    Parser("plugins.modules.reboot_marker:read_boot_id",
           in_root("/proc/sys/kernel/random/boot_id", reboot_marker.read_boot_id), (reboot_marker.MarkerError,),
           [b"0b5c5f5e-5f3c-4e9a-9d0e-2f7b8c1a2d3e\n"]),
    Parser("plugins.module_utils.gpu_node:unit_exists",
           in_root("/etc/systemd/system/nvidia-persistenced.service",
                   lambda r: gpu_node.unit_exists(r, "nvidia-persistenced.service")), (), [b"[Unit]\n"]),
    Parser("plugins.filter.memory:memory_cmdline_hugepages",
           lambda d: memory_filter.memory_cmdline_hugepages(text(d)), (AnsibleFilterError,),
           [b"BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet hugepagesz=1G hugepages=8 default_hugepagesz=2M\n"]),
    Parser("plugins.module_utils.ledger_core:load_ledger",
           in_root(LEDGER, lambda r: ledger_core.load_ledger(r, LEDGER)),
           (ledger_core.LedgerError,), [json.dumps(_ledger).encode() for _ledger in (
               {"schema": ledger_core.SCHEMA, "paths": {"/proc/sys/vm/swappiness": {"value": "60", "exists": True}},
                "files": {"/etc/sysctl.d/90-tunefleet.conf": {"state": "absent", "created_dirs": []}},
                "services": {"irqbalance": {"enabled": "enabled", "active": "active"}},
                "kernel_modules": {"nvidia_peermem": {"loaded": False}}},)]),
    Parser("plugins.module_utils.ledger_core:read_live_value",
           in_root("/proc/sys/vm/swappiness", lambda r: ledger_core.read_live_value(r, "/proc/sys/vm/swappiness")),
           (ledger_core.LedgerError,), _fixture("ledger/tcp_rmem", "ledger/thp_enabled", "ledger/loop0_scheduler")),
    Parser("plugins.module_utils.preflight_checks:max_mtu_from_ip",
           lambda d: preflight_checks.max_mtu_from_ip(text(d)), (),
           _fixture("preflight/ip_d_j_link_show.json", "preflight/ip_d_link_show.txt")),
    # the prolog's NVML child's answer through the pipe (bounded JSON: a damaged marshal stream took 12 GB)
    Parser("verify.scheduler.nvml:_unpack", lambda d: nvml._unpack(d, lambda: "exit 0"), ()),
    Parser("verify.scheduler.policy:parse", lambda d: scheduler_policy.loads(text(d), "fuzz"),
           (scheduler_policy.PolicyError,), [b'{"xids": {"79": "warn"}, "checks": {"health.ib": {"do": "drain", '
                                             b'"after_runs": 3, "recovery_s": 900}}}']),
]


def _xid_events_bounded(log: str) -> list:
    """xid_events never raises, and every code it gives is bounded (None: unreadable)."""
    events = kernel_log.xid_events(log)
    for event in events:
        assert event.code is None or 0 <= event.code < 10 ** kernel_log.MAX_CODE_DIGITS
    return events


def _records_bounded(log: str):
    reading = kernel_log.read_records(log)
    for record in reading.records:
        assert isinstance(record.message, str) and len(record.message) <= kernel_log.MAX_LINE
        assert record.uptime_s is None or 0 <= record.uptime_s < 1e11
    assert len(reading.unread) <= len(log.splitlines())
    return reading


def _rate_bounded(value: str):
    """parse_rate gives None (unreadable) or a finite positive rate, never an exception."""
    from verify.checks import health_ib

    rate = health_ib.parse_rate(value)
    assert rate is None or (math.isfinite(rate) and rate > 0), rate
    return rate


def _pcie(n: node.Node):
    from verify.facts import hardware

    gpu = hardware.GpuLinks(0, "NVIDIA H200", "00000000:18:00.0")
    hardware.read_pcie(n, gpu)
    return gpu


def _all_checks(n: node.Node) -> list:
    from verify.checks import run_checks

    results = run_checks(SPEC, n)
    assert results
    return results


def _fleet_report(root: str):
    from verify.fleet.report import write_reports
    from verify.fleet.summary import build_summary

    nodes, errors = model.load_fleet_dir(root)
    with tempfile.TemporaryDirectory(prefix="tf-fuzz-out-") as out:
        write_reports(build_summary(nodes, errors), Path(out), ("json", "md", "junit"))
    return nodes, errors


# Functions the naming convention finds that are not parsers of outside input, or are covered
# through another entry; each with its reason.
EXEMPT = {
    "verify.facts.kernel_log:_reading": "read_records of the text, cached; read_records is fuzzed",
    "verify.fleet.fix_plan:load_run": "a run directory's report.json files through fleet.model's json_loads (fuzzed) "
                                      "and fix_plan._load, refusing with FixRefused",
    "verify.fleet.report:read_refused_archives": "reads <run>/unpack/refused.json, which the controller's unpack "
                                                 "writes; through _side_file (bounded), errors are LoadErrors",
    "verify.fleet.slices:_read_side": "a slice's side file through loads_json_bytes_bounded; every error is a note",
    "verify.local_run:load_named_profile": "wraps verify.profiles:load_profile (shipped files) into UsageError",
    "verify.local_run:parse_formats": "argparse input, refused with UsageError; not file or tool output",
    "verify.profiles:load_profile": "shipped files only; bounded load + validate_profile are fuzzed",
    "verify.node:Node.read": "returns text or None (errors='replace'); its callers' parsers are fuzzed",
    "verify.node:Node.read_value": "strip() of Node.read",
    "verify.node:Node.readlink_name": "a symlink's basename; no parsing",
    "verify.facts.health_smi:reading": "the node's nvidia-smi outputs, each through read_any (fuzzed)",
    "verify.facts.health_smi:_read": "inside reading",
    "verify.facts.dcgm_health:read": "the node's dcgmi output through parse (fuzzed)",
    "verify.facts.fabric:read_manager_log": "the node's Fabric Manager log through parse_manager_log (fuzzed)",
    "verify.fleet.model:_load_paths": "inside load_fleet_dir, fuzzed with it",
    "verify.fleet.model:_read_json": "json_loads of a file; fuzzed through parse_node_report/load_fleet_dir",
    "verify.fleet.multinode:_read_json": "reads this package's own engine output (torch_allreduce JSON)",
    "verify.fleet.model:load_fleet_dir_for": "load_fleet_dir (fuzzed) with its errors said on stderr",
    "verify.fleet.report:read_addresses": "reads the address map playbooks/verify.yml writes; errors are LoadErrors",
    "verify.fleet.baseline_rules:parse_rules": "inside load_rules, fuzzed with it",
    "verify.fleet.baseline_cli:read_history": "opens the history through verify.history.store (its own refusals)",
    "verify.fleet.report:read_regressions": "reads the regression file the fleet run writes; errors are LoadErrors",
    "verify.bench.gpu_engine:Sampler._read": "NVML calls, no text parsed",
    "verify.facts.links:_read": "sysfs read with errors='replace'; fuzzed through discover_ports",
    "verify.bench.odirect_read:read_direct": "a benchmark engine (O_DIRECT reads), not a parser",
    "plugins.module_utils.node_reads:_read": "fuzzed through read_node",
    "plugins.module_utils.sysfs:read_text": "open().read().strip(), errors='replace'; via read_nic, read_node",
    "plugins.modules.kernel_values:_read": "open().read() with errors='replace'; current_value is fuzzed",
    "plugins.module_utils.block_devices:*": "reads via sysfs.read_text; find_devices runs on this machine's tree",
    "plugins.module_utils.preflight_checks:_read": "helper E's preflight reader (errors='replace')",
    "verify.bounded_load:read_bounded": "bytes up to a limit; fuzzed through load_json_bounded/load_yaml_bounded",
    "verify.fleet.model:_parse_result": "inside parse_node_report/parse_crossnode, fuzzed with them",
    "verify.safe_io:read_trusted_file": "returns a file's text (no parsing); its callers parse",
    "verify.checks.irqbalance:*": "helper C's module; irqbalance_cmdline reads NUL-separated argv",
    "verify.facts.kernel_log:read_kernel_log": "runs dmesg/journalctl; its text goes to parse_xids/parse_lost (fuzzed)",
    "verify.facts.kernel_log:_read_kernel_log": "the unmemoised read_kernel_log",
    "verify.facts.hardware:read_nvlinks": "runs nvidia-smi nvlink --status; parse_nvlink_status is fuzzed",
    "verify.inject:_read": "read_trusted_file of one capture file; load() is tested in test_inject.py",
    "verify.safe_io:read_capped": "the bounded reader itself (test_security_reads.py plants FIFOs, links, /dev/zero)",
    "verify.safe_io:read_capped_fd": "the bounded reader itself, by descriptor",
    "verify.safe_io:read_beneath": "the bounded reader resolving beneath a --root tree (test_security_tree_race.py)",
    "plugins.modules.reboot_marker:read_only": "read_marker (fuzzed above) with its result reshaped",
    "verify.scheduler.kernel_events:read_kmsg": "reads /dev/kmsg; each record goes to parse_kmsg_record (fuzzed)",
    "verify.scheduler.kernel_events:read_since": "read_kmsg from a cursor",
    "verify.scheduler.nvml:read_raw": "NVML calls, no text parsed",
    "verify.scheduler.nvml:reading_problem": "a shape check of the decoded answer: fuzzed through nvml:_unpack and "
                                             "tests/unit/test_scheduler_total.py",
    "verify.facts.fabric:read_gpu_fabric": "NVML / nvidia-smi -q; its text goes to parse_smi_fabric (fuzzed)",
    "verify.facts.fabric:read_manager": "systemctl and nv-fabricmanager --version; parse_manager_version is fuzzed",
    "verify.stats.outliers:readings": "a CheckResult's own repeated figures (details.tries/runs), no text parsed; "
                                      "each figure passes bounded_load.finite_number",
    "verify.facts.gpu_processes:read_gpu_processes": "runs nvidia-smi; its stdout goes to parse_compute_apps (fuzzed)",
    "verify.facts.peer_access:read_peer_access": "the primed NVML reading, else read_smi_p2p",
    "verify.facts.peer_access:read_smi_p2p": "nvidia-smi topo -p2p r/w; its text goes to parse_p2p_matrix (fuzzed)",
    "verify.scheduler.nvml:read_p2p_row": "NVML calls, no text parsed",
    "verify.facts.peer_access:read_gpu_links": "nvidia-smi topo -m; its text goes to parse_topo_gpu_links (fuzzed)",
    "verify.facts.pci_path:read_paths": "sysfs through Node.read_binary; parse_acs is fuzzed",
    "verify.facts.pci_path:read_iommu": "sysfs and /proc/cmdline through the Node; parse_cmdline is fuzzed",
    "plugins.module_utils.pci_config:read_config": "the module's config-space read; walked as parse_acs",
    "plugins.module_utils.pci_config:read_acs": "read_config + find_acs (fuzzed through parse_acs)",
    "verify.kernel_rules:load_home": "imports the collection's own module_utils file, no input parsed",
    "verify.node:Node.read_binary": "read_capped/read_beneath of one file; Node.read's callers' parsers are fuzzed",
    "verify.scheduler.nvml:read_gpu": "NVML calls, no text parsed",
    "verify.scheduler.nvml:read_fabric": "one NVML call filling NVML's own struct, no text parsed",
    "verify.scheduler.nvml:_read_session": "NVML calls, no text parsed",
    "verify.fleet.nccl_pair:_read": "a live sysfs attribute through read_capped",
    "verify.fleet.pairing:load_outcomes": "load_json_bounded of nccl_pair's own output; from_dict refuses bad shapes",
    "verify.fleet.report:read_pairs": "blame's own summary, bounded; damaged cells skipped (test_fleet_pairs_report)",
    "verify.facts.aer:read_counters": "sysfs aer_dev_* files through the Node; parse_counters is fuzzed",
    "verify.checks.health_*:*": "helper F's new health checks; run through verify.checks:run_checks",
    "verify.cli:Parser.parse_known_args": "argparse's own, after a typo check over the words (test_cli_typos.py)",
}


def discovered() -> list:
    """module:function names of every parse_*/load_*/read_* (leading _ allowed) in verify/ and plugins/."""
    found = []
    for base in ("verify", "plugins"):
        for path in sorted((REPO / base).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for item in ast.walk(tree):
                if isinstance(item, ast.ClassDef):
                    for fn in item.body:
                        if isinstance(fn, ast.FunctionDef) and _is_parser_name(fn.name):
                            found.append(f"{module}:{item.name}.{fn.name}")
            for fn in tree.body:
                if isinstance(fn, ast.FunctionDef) and _is_parser_name(fn.name):
                    found.append(f"{module}:{fn.name}")
    return found


def _is_parser_name(name: str) -> bool:
    return name.lstrip("_").startswith(("parse_", "load_", "read_", "parse", "read"))


def _exempt(name: str) -> bool:
    module, _, function = name.partition(":")
    for key in EXEMPT:
        key_module, _, key_function = key.partition(":")
        if key_function == "*" and (module == key_module or (key_module.endswith("*")
                                                              and module.startswith(key_module[:-1]))):
            return True
        if key == name:
            return True
    return False


def test_every_parser_is_fuzzed():
    covered = {p.name for p in PARSERS}
    missing = [n for n in discovered() if n not in covered and not _exempt(n)]
    assert not missing, f"add these parsers to PARSERS (or EXEMPT, with a reason): {missing}"


def test_registry_names_are_real():
    names = set(discovered())
    stale = [p.name for p in PARSERS if _is_parser_name(p.name.split(":")[1].split(".")[-1].split("/")[0])
             and p.name.split("/")[0] not in names]
    assert not stale, f"PARSERS names functions that no longer exist: {stale}"


# ---- inputs ---------------------------------------------------------------------------------------

BAD_NUMBERS = ["nan", "NaN", "inf", "-inf", "Infinity", "-1", "-0.5", "²", "٣", "1e309", "9" * 5000,
               "99999999", "0", "", "0x10", "1.2.3", "0-99999999"]
NUMBER = r"-?\d+(?:\.\d+)?"


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"a parser ran longer than {HANG_S} s")


@st.composite
def mutated(draw, fixtures: list) -> bytes:
    """A real fixture, broken the ways a sick node breaks output."""
    import re

    data = draw(st.sampled_from(fixtures)) if fixtures else b""
    for _ in range(draw(st.integers(1, 3))):
        lines = data.split(b"\n")
        op = draw(st.sampled_from(["cut", "cut_mid", "drop", "repeat", "number", "nest", "bytes", "nul"]))
        if op == "cut":
            data = b"\n".join(lines[: draw(st.integers(0, len(lines)))])
        elif op == "cut_mid":
            data = data[: draw(st.integers(0, len(data)))]
        elif op == "drop" and lines:
            index = draw(st.integers(0, len(lines) - 1))
            data = b"\n".join(lines[:index] + lines[index + 1:])
        elif op == "repeat" and lines:
            index = draw(st.integers(0, len(lines) - 1))
            data = b"\n".join(lines[:index] + [lines[index]] * draw(st.integers(2, 50)) + lines[index:])
        elif op == "number":
            decoded = data.decode("utf-8", errors="surrogateescape")
            spots = list(re.finditer(NUMBER, decoded))
            bad = draw(st.sampled_from(BAD_NUMBERS))
            if spots:
                spot = spots[draw(st.integers(0, len(spots) - 1))]
                decoded = decoded[: spot.start()] + bad + decoded[spot.end():]
            else:
                decoded += bad
            data = decoded.encode("utf-8", errors="surrogateescape")
        elif op == "nest":
            at = draw(st.integers(0, len(data)))
            depth = draw(st.sampled_from([70, 2000, 100000]))
            opener = draw(st.sampled_from([b"[", b'{"a":', b"- "]))
            data = data[:at] + opener * depth + data[at:]
        elif op == "bytes":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.sampled_from([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80" * 3])) + data[at:]
        elif op == "nul":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + b"\x00" + data[at:]
    return data


def inputs(parser: Parser):
    random_text = st.text(max_size=400).map(lambda s: s.encode("utf-8", errors="surrogatepass"))
    return st.one_of(random_text, st.binary(max_size=200), mutated(parser.fixtures))


def check_total(parser: Parser, data: bytes) -> None:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        parser.call(data)
    except parser.errors as exc:
        assert str(exc).strip(), f"{parser.name} raised {type(exc).__name__} with no message"
    except Hang:
        raise
    except Exception as exc:  # noqa: BLE001 - that is the finding
        raise AssertionError(f"{parser.name} raised {type(exc).__name__}: {str(exc)[:200]} "
                             f"(documented: {[e.__name__ for e in parser.errors]})") from exc
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("parser", PARSERS, ids=[p.name for p in PARSERS])
def test_real_fixtures_parse(parser: Parser):
    """The unbroken captures are read without error (else the fuzzing below tests nothing)."""
    for data in parser.fixtures:
        parser.call(data)


@pytest.mark.parametrize("parser", PARSERS, ids=[p.name for p in PARSERS])
def test_parser_is_total(parser: Parser):
    @given(data=inputs(parser))
    def run(data: bytes) -> None:
        check_total(parser, data)

    run()


def test_nan_and_impossible_figures_never_pass():
    for bad in (math.nan, math.inf, -1.0, -math.inf, 10 ** 400):
        status, _ = thresholds.Threshold(limit=1.0).judge(bad)
        assert status == Status.ERROR
        status, _ = thresholds.Threshold(limit=1.0, kind="max").judge(bad)
        assert status == Status.ERROR


def test_a_deeply_nested_scheduler_state_is_a_value_error_not_a_crash():
    # json.loads raised RecursionError on it: the prolog would have ended with a traceback
    with pytest.raises(ValueError, match="scheduler state"):
        scheduler_state.parse("[" * 100_000 + "]" * 100_000)
