"""The kernel rules have one home (plugins/module_utils/kernel_rules.py); every caller on both sides
of the house is run here over the same tables and must agree with it and with the kernel.

Each table row is fed to every caller in its own form (its own error type, its own fallback when a
file holds no bracketed choice), so a caller that grows its own copy of a rule again, and drifts,
fails here. The cpulist table's verdicts were measured on Linux 6.18 by writing each text to a
private cpuset's cpuset.cpus (the same bitmap_parselist as /proc/irq/*/smp_affinity_list).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))  # the collection link `make venv` creates

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import (  # noqa: E402
    block_devices,
    kernel_rules,
    ledger_core,
    preflight_checks,
)

import verify.kernel_rules  # noqa: E402
from tests.helpers import loop_device  # noqa: E402
from tests.helpers.fake_node import FakeTree, desired_state  # noqa: E402
from tests.helpers.plugins import load_molecule_file, load_plugin  # noqa: E402
from verify import node  # noqa: E402
from verify.checks import common as checks_common  # noqa: E402
from verify.checks import conflicts, storage, sysctl  # noqa: E402
from verify.result import Status  # noqa: E402

kernel_values = load_plugin("modules", "kernel_values")
sysctl_filters = load_plugin("filter", "sysctl_tuning")
network_filters = load_plugin("filter", "network_tuning")


node_state = load_molecule_file("node_state")
node_fixture = load_molecule_file("node_fixture")


def test_verify_and_the_collection_load_the_same_file():
    assert Path(verify.kernel_rules._home.__file__).resolve() == Path(kernel_rules.__file__).resolve()
    assert Path(node_state.kernel_rules.__file__).resolve() == Path(kernel_rules.__file__).resolve()
    assert verify.kernel_rules.__all__ == kernel_rules.__all__


# ---------------------------------------------------------------- CPU lists

CPULISTS = [
    ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
    ("0-7:1/2", {0, 2, 4, 6}),  # the kernel's stride: the first 1 of every 2
    ("0-1:1/2,1", {0, 1}),
    ("0-9:2/4", {0, 1, 4, 5, 8, 9}),
    ("0-1:0/2", set()),
    ("0-0:1/1", {0}),
    ("5", {5}),
    ("", set()),
    ("0-1\n", {0, 1}),
    (" 0 , 1 ", {0, 1}),
    ("\t0", {0}),
    ("0,,1", {0, 1}),  # empty regions: the kernel takes them
    ("0,", {0}),
    ("00-01", {0, 1}),
    ("65535", {65535}),
]
BAD_CPULISTS = ["0-7:2", "0-1:1", "0 - 1", "1-0", "0x1", "+1", "-1", "0-1:3/2", "0-1:1/0", "0:1/2", "a-b",
                "N", "all", "65536", "0-99999999", "9" * 5000, "٣"]


def _network_cpus(text: str) -> set:
    return set(network_filters._cpus(text))


CPULIST_CALLERS = [
    ("plugins.module_utils.kernel_rules", kernel_rules.parse_cpulist, kernel_rules.KernelRuleError),
    ("verify.kernel_rules", verify.kernel_rules.parse_cpulist, verify.kernel_rules.KernelRuleError),
    ("verify.node", node.parse_cpulist, node.ReadError),
    ("plugins.modules.kernel_values", kernel_values.parse_cpulist, ValueError),
    ("plugins.filter.network_tuning", _network_cpus, AnsibleFilterError),
]


@pytest.mark.parametrize("caller, parse, _error", CPULIST_CALLERS, ids=[c[0] for c in CPULIST_CALLERS])
@pytest.mark.parametrize("text, cpus", CPULISTS)
def test_every_caller_reads_a_cpulist_alike(caller, parse, _error, text, cpus):
    assert set(parse(text)) == cpus


@pytest.mark.parametrize("caller, parse, error", CPULIST_CALLERS, ids=[c[0] for c in CPULIST_CALLERS])
@pytest.mark.parametrize("text", BAD_CPULISTS)
def test_every_caller_refuses_what_the_kernel_refuses(caller, parse, error, text):
    with pytest.raises(error, match="cpulist|CPU"):
        parse(text)


@pytest.mark.parametrize("text, cpus", [row for row in CPULISTS if row[1]])
def test_kernel_values_compares_cpulists_by_their_cpus(text, cpus):
    kernel_form = kernel_rules.format_cpulist(cpus)
    assert kernel_values.same_value("/proc/irq/5/smp_affinity_list", kernel_form, text)
    assert not kernel_values.same_value("/proc/irq/5/smp_affinity_list", kernel_form, "0-7:2")


@pytest.mark.parametrize("text, cpus", CPULISTS)
def test_format_is_the_kernels_and_round_trips(text, cpus):
    formatted = kernel_rules.format_cpulist(cpus)
    assert kernel_rules.parse_cpulist(formatted) == cpus
    assert formatted == verify.kernel_rules.format_cpulist(cpus)
    assert kernel_rules.format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"


def test_the_bound_is_the_callers_to_choose():
    with pytest.raises(node.ReadError, match="beyond 7"):
        node.parse_cpulist("0-8", limit=8)


# ---------------------------------------------------------------- [active] choices

CHOICES = [
    ("none [mq-deadline] kyber bfq\n", "mq-deadline", ["none", "mq-deadline", "kyber", "bfq"]),
    ("[none] mq-deadline\n", "none", ["none", "mq-deadline"]),
    ("always [madvise] never\n", "madvise", ["always", "madvise", "never"]),
    ("\t[bfq]  none \n", "bfq", ["bfq", "none"]),
    ("[a] [b]", "a", ["a", "b"]),
    ("[] none [kyber]", "kyber", ["none", "kyber"]),
    ("noop deadline", None, ["noop", "deadline"]),
    ("none", None, ["none"]),
    ("x[y]z", None, ["x[y]z"]),
]


@pytest.mark.parametrize("text, active, offered", CHOICES)
def test_every_caller_reads_the_active_choice_alike(text, active, offered, tmp_path):
    assert kernel_rules.parse_choices(text) == (active, offered)
    assert verify.kernel_rules.parse_choices(text) == (active, offered)
    assert kernel_values.current_value("/sys/kernel/mm/transparent_hugepage/enabled", text) == (active or text.strip())
    assert preflight_checks.choices(text) == offered
    assert kernel_values.offered_schedulers(text) == offered
    # Where the file holds no bracketed choice each caller keeps its own fallback.
    plain = text.strip()
    assert kernel_values.current_value("/sys/block/vda/queue/scheduler", text) == (active or plain)
    assert ledger_core.selected_choice(plain) == (active or plain)
    assert node_fixture.active_choice(text) == (active or plain)
    assert node_fixture.choices(text) == offered
    assert loop_device._active("scheduler", text) == (active or plain)
    queue = tmp_path / "vda" / "queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").write_text(text)
    device = block_devices.read_device(str(tmp_path / "vda"))
    assert (device["scheduler"], device["schedulers"]) == (active or plain or None, offered)
    if active is None:
        with pytest.raises(ValueError, match="no \\[active\\] entry"):
            checks_common.bracketed_choice(text)
        return
    assert checks_common.bracketed_choice(text) == active
    judged = storage.judge_scheduler("vda", "none-such", text)
    assert (judged.observed, judged.details["available"]) == (active, offered)


# ---------------------------------------------------------------- sysctl keys and paths

KEYS = [
    ("net.core.rmem_max", "/proc/sys/net/core/rmem_max"),
    ("net.ipv4.neigh.default.gc_thresh3", "/proc/sys/net/ipv4/neigh/default/gc_thresh3"),
    ("net/ipv4/conf/eth0.100/rp_filter", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"),  # sysctl(8): '/' keeps dots
    ("fs.dentry-state", "/proc/sys/fs/dentry-state"),
    ("kernel.sched_domain.cpu0.domain0.flags", "/proc/sys/kernel/sched_domain/cpu0/domain0/flags"),
    ("net.ipv4.conf.ib0:1.rp_filter", "/proc/sys/net/ipv4/conf/ib0:1/rp_filter"),
]
BAD_KEYS = ["", "vm", "../../etc/passwd", "net..core", "net.core.rmem max", "net/../etc/passwd", "net/./core/x",
            "net.core.", "net/core/", "/net/core/rmem_max", "net//core", "Net.core.x", "net.core.x\n", "net.core.ä",
            "a" + ".b" * 200 + "!"]


@pytest.mark.parametrize("key, path", KEYS)
def test_every_caller_maps_a_key_to_the_same_path(key, path):
    assert kernel_rules.sysctl_path(key) == path
    assert kernel_rules.sysctl_key(path) == key
    assert sysctl_filters.sysctl_proc_path(key) == path
    assert sysctl.key_path(key) == path
    assert preflight_checks.sysctl_path(key) == path
    assert sysctl_filters.sysctl_value_problems({key: 1}) == []
    assert sysctl_filters.sysctl_live_values({key: 1}) == {path: 1}


@pytest.mark.parametrize("key", BAD_KEYS)
def test_every_caller_refuses_the_same_keys(key, tmp_path):
    assert kernel_rules.sysctl_key_problem(key)
    with pytest.raises(kernel_rules.KernelRuleError, match="is not a sysctl key"):
        kernel_rules.sysctl_path(key)
    with pytest.raises(AnsibleFilterError, match="is not a sysctl name"):
        sysctl_filters.sysctl_proc_path(key)
    assert sysctl_filters.sysctl_value_problems({key: 1}) == [f"{key!r}: not a sysctl name"]
    problems = preflight_checks.check_sysctl(str(tmp_path), {"sysctl_settings": {key: 1}})
    assert [p.reason for p in problems] == ["is not a sysctl key (expected e.g. net.core.rmem_max)"]
    results = sysctl.run(desired_state(sysctl={"settings": {key: 1}, "skip_keys": []}), FakeTree(tmp_path).node())
    assert [r.status for r in results] == [Status.ERROR]
    assert "is not a sysctl key" in results[0].reason


def test_a_path_outside_proc_sys_is_no_key():
    with pytest.raises(kernel_rules.KernelRuleError, match="not under /proc/sys/"):
        kernel_rules.sysctl_key("/sys/block/vda/queue/scheduler")
    with pytest.raises(kernel_rules.KernelRuleError, match="is not a sysctl key"):
        kernel_rules.sysctl_key("/proc/sys/net/../../etc/passwd")


# ---------------------------------------------------------------- values

VALUES = [
    ("4096\t87380\t6291456\n", "4096 87380 6291456"),  # how the kernel prints tcp_rmem
    ("4096 87380  6291456", "4096 87380 6291456"),
    (" 1 \n", "1"),
    ("a\t\tb  c", "a b c"),
    (0, "0"),
    (1048576, "1048576"),
]


@pytest.mark.parametrize("raw, normal", VALUES)
def test_every_caller_normalises_a_value_alike(raw, normal, tmp_path):
    assert kernel_rules.normalise_value(raw) == normal
    assert sysctl.normalize(raw) == normal
    assert kernel_values.current_value("/proc/sys/net/ipv4/tcp_rmem", str(raw)) == normal
    assert kernel_values.same_value("/proc/sys/net/ipv4/tcp_rmem", normal, raw)
    assert ledger_core.same_value(normal, str(raw))
    assert conflicts.parse_sysctl_conf(f"net.ipv4.tcp_rmem = {raw}\n", "x.conf")[0].value == normal.strip()
    (tmp_path / "net" / "ipv4").mkdir(parents=True)
    (tmp_path / "net" / "ipv4" / "tcp_rmem").write_text(str(raw))
    assert node_state.sysctls(tmp_path) == {"net.ipv4.tcp_rmem": normal}
    tree = FakeTree(tmp_path / "node")
    tree.write("/proc/sys/net/ipv4/tcp_rmem", str(raw))
    judged = sysctl.run(desired_state(sysctl={"settings": {"net.ipv4.tcp_rmem": normal}, "skip_keys": []}), tree.node())
    assert [(r.status, r.observed) for r in judged] == [(Status.PASS, normal)]


# ---------------------------------------------------------------- where verify finds the home

def test_an_installed_wheel_finds_the_home_under_its_data(tmp_path):
    """The wheel's layout (setup.py copies the file under verify/_data): nothing else on the path."""
    site = tmp_path / "site-packages"
    (site / "verify").mkdir(parents=True)
    shutil.copy(ROOT / "verify" / "kernel_rules.py", site / "verify" / "kernel_rules.py")
    (site / "verify" / "__init__.py").write_text("")
    data = site / "verify" / "_data" / "plugins" / "module_utils"
    data.mkdir(parents=True)
    shutil.copy(ROOT / "plugins" / "module_utils" / "kernel_rules.py", data / "kernel_rules.py")
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                           "import verify.kernel_rules as k; print(k._home.__file__, k.sysctl_path('vm.swappiness'))"],
                          cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(data / "kernel_rules.py"), "/proc/sys/vm/swappiness"]
    (data / "kernel_rules.py").unlink()
    failed = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                             "import verify.kernel_rules"], cwd=tmp_path, capture_output=True, text=True)
    assert failed.returncode != 0 and "kernel_rules.py is neither in" in failed.stderr


def test_the_molecule_harness_runs_where_prepare_installs_it(tmp_path):
    """prepare.yml copies node_state.py, node_fixture.py and kernel_rules.py into one directory."""
    for source in ("molecule/shared/files/node_state.py", "molecule/shared/files/node_fixture.py",
                   "plugins/module_utils/kernel_rules.py"):
        shutil.copy(ROOT / source, tmp_path / Path(source).name)
    for script in ("node_state.py", "node_fixture.py"):
        subprocess.run([sys.executable, "-I", tmp_path / script, "--help"], capture_output=True, text=True, check=True)
    (tmp_path / "kernel_rules.py").unlink()
    failed = subprocess.run([sys.executable, "-I", tmp_path / "node_state.py", "--help"],
                            capture_output=True, text=True)
    assert failed.returncode != 0 and "kernel_rules.py is neither next to" in failed.stderr
