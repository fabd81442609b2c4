"""memory role: the THP modes through kernel_values, the huge page module against fake and real
kernel trees, and the cmdline filters."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/preflight"


hugepages = load_plugin("modules", "memory_hugepages")
kv = load_plugin("modules", "kernel_values")
memory_filters = load_plugin("filter", "memory")
ROLE_VARS = yaml.safe_load((ROOT / "roles/memory/vars/main.yml").read_text())


# --- transparent huge pages: the role's one kernel_values call -------------------------------

THP = "/sys/kernel/mm/transparent_hugepage"
ENABLED, DEFRAG = f"{THP}/enabled", f"{THP}/defrag"


class ThpKernel:
    """kernel_values' own /sys I/O pointed at files under tmp_path (the module keeps its real
    paths, so it treats them as THP choice files). A write acts as the kernel's: an offered mode
    becomes the bracketed one, any other word is refused with EINVAL."""

    def __init__(self, tmp_path: Path, monkeypatch, enabled: str, defrag: str) -> None:
        self.base, self.writes = tmp_path / "transparent_hugepage", []
        self.base.mkdir()
        (self.base / "enabled").write_text(enabled)
        (self.base / "defrag").write_text(defrag)
        real_read = kv._read
        monkeypatch.setattr(kv, "_read", lambda path: real_read(self.file(path)))
        monkeypatch.setattr(kv, "_write", self.write)

    def file(self, path: str) -> str:
        assert path.startswith(THP + "/"), path  # nothing else is read or written here
        return str(self.base / Path(path).name)

    def shown(self, name: str) -> str:
        return (self.base / name).read_text()

    def write(self, path: str, value: str) -> None:
        self.writes.append((path, value))
        offered = self.shown(Path(path).name).replace("[", "").replace("]", "").split()
        if value.strip() not in offered:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        (self.base / Path(path).name).write_text(
            " ".join(f"[{mode}]" if mode == value.strip() else mode for mode in offered) + "\n")


@pytest.fixture
def thp(tmp_path, monkeypatch):
    # Captured from the CI machine's kernel: always [madvise] never / ... [madvise] never.
    return ThpKernel(tmp_path, monkeypatch, (FIXTURES / "thp_enabled").read_text(),
                     (FIXTURES / "thp_defrag").read_text())


def run_kernel_values(capsys, check_mode: bool, **values) -> dict:
    """The module's main() with the role's labels, as the role calls it (no ledger: tested in test_ledger)."""
    args = {"values": {f"{THP}/{name}": mode for name, mode in values.items()},
            "labels": ROLE_VARS["__memory_thp_labels"], "_ansible_check_mode": check_mode, "_ansible_diff": True}
    with patch_module_args(args), pytest.raises(SystemExit):
        kv.main()
    return json.loads(capsys.readouterr().out)


def test_thp_files_are_choice_files_named_by_their_variables():
    values, labels = ROLE_VARS["__memory_thp_values"], ROLE_VARS["__memory_thp_labels"]
    assert sorted(values) == sorted(labels) == [DEFRAG, ENABLED]
    assert all(kv._kind(path) == "choice" for path in values)
    assert {labels[path]: values[path] for path in values} == {
        "memory_thp_enabled": "{{ memory_thp_enabled }}", "memory_thp_defrag": "{{ memory_thp_defrag }}"}


def test_thp_compares_the_bracketed_mode(thp):
    assert kv.current_value(DEFRAG, thp.shown("defrag")) == "madvise"
    assert kv.plan({ENABLED: "madvise", DEFRAG: "madvise"}) == ([], [])
    assert kv.plan({ENABLED: "always"}) == ([{"path": ENABLED, "before": "madvise", "after": "always"}], [])


def test_thp_check_mode_reports_and_writes_nothing(thp, capsys):
    result = run_kernel_values(capsys, True, enabled="always", defrag="madvise")
    assert result["changed"] is True
    assert result["changes"] == [{"path": ENABLED, "before": "madvise", "after": "always"}]
    assert result["diff"]["before"] == f"{ENABLED} = madvise\n" and result["diff"]["after"] == f"{ENABLED} = always\n"
    assert thp.writes == [] and thp.shown("enabled") == "always [madvise] never\n"


def test_thp_writes_only_what_differs_then_nothing(thp, capsys):
    result = run_kernel_values(capsys, False, enabled="always", defrag="madvise")
    assert result["changed"] is True and [c["path"] for c in result["changes"]] == [ENABLED]
    assert thp.writes == [(ENABLED, "always")] and thp.shown("enabled") == "[always] madvise never\n"
    again = run_kernel_values(capsys, False, enabled="always", defrag="madvise")
    assert again["changed"] is False and again["changes"] == [] and len(thp.writes) == 1


def test_thp_mode_not_offered_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    # A kernel that offers no madvise: the defrag change asked with it is not written either.
    thp = ThpKernel(tmp_path, monkeypatch, "always [never]\n", "always defer [madvise] never\n")
    result = run_kernel_values(capsys, False, enabled="madvise", defrag="never")
    assert result["failed"] is True
    assert result["msg"] == (f"nothing was changed: memory_thp_enabled: {ENABLED}: "
                             "mode 'madvise' is not offered (offered: always never)")
    assert thp.writes == [] and thp.shown("defrag") == "always defer [madvise] never\n"


def test_thp_plan_on_this_machine():
    # Real kernel files, read only.
    if not Path(ENABLED).exists():
        pytest.skip("this kernel has no transparent huge pages")
    current = Path(ENABLED).read_text()
    selected = current[current.index("[") + 1:current.index("]")]
    assert kv.plan({ENABLED: selected}) == ([], [])
    offered = current.replace("[", "").replace("]", "").split()
    other = next(mode for mode in offered if mode != selected)
    assert kv.plan({ENABLED: other}) == ([{"path": ENABLED, "before": selected, "after": other}], [])


def test_default_run_is_one_module_call():
    # Issue 13: with no huge pages asked, every task but the kernel_values call is gated off
    # (the THP stat only runs without the preflight fact).
    tasks = yaml.safe_load((ROOT / "roles/memory/tasks/main.yml").read_text())
    unconditional = [task["name"] for task in tasks if "when" not in task]
    assert unconditional == ["Set and persist the THP modes, drop-ins and boot units"]
    call = next(task for task in tasks if "tunefleet.gpu_node.kernel_values" in task)
    assert call["tunefleet.gpu_node.kernel_values"]["recorded_by"] == "memory"


# --- 2 MiB huge pages --------------------------------------------------------------------

def make_node_tree(tmp_path: Path, nodes: dict, default_kb: int = 2048, total: int = 0) -> tuple:
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    (proc / "sys/vm").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       24576000 kB\nHugepagesize:       {default_kb} kB\n")
    (proc / "sys/vm/nr_hugepages").write_text(f"{total}\n")
    for node, count in nodes.items():
        d = sysfs / f"devices/system/node/node{node}/hugepages/hugepages-2048kB"
        d.mkdir(parents=True)
        (d / "nr_hugepages").write_text(f"{count}\n")
    return str(proc), str(sysfs)


def node_count(sysfs: str, node: int) -> int:
    path = Path(sysfs) / f"devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages"
    return int(path.read_text())


def test_total_is_written_and_read_back(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 0})
    result = hugepages.apply(1024, {}, proc, sysfs, check_mode=False)
    assert result["changed"] is True
    assert result["pages"] == [{"name": "total", "path": f"{proc}/sys/vm/nr_hugepages",
                                "before": 0, "after": 1024, "wanted": 1024, "asked": 1024}]
    assert hugepages.apply(1024, {}, proc, sysfs, check_mode=False)["changed"] is False


def test_a_larger_pool_is_kept_total_and_per_node_and_said(tmp_path):
    # at_least (kernel_rules.DIRECTIONS memory.hugepages_2m): another service's larger pool is never shrunk.
    proc, sysfs = make_node_tree(tmp_path, {0: 600, 1: 10}, total=8192)
    total = hugepages.apply(1024, {}, proc, sysfs, check_mode=False)
    assert total["changed"] is False and total["pages"][0]["wanted"] == 8192
    assert Path(proc, "sys/vm/nr_hugepages").read_text().strip() == "8192"
    assert "total: 8192 pages kept, more than the 1024 asked" in total["msg"]
    split = hugepages.apply(None, {0: 512, 1: 512}, proc, sysfs, check_mode=False)
    assert (node_count(sysfs, 0), node_count(sysfs, 1)) == (600, 512)  # node0 kept, node1 raised
    assert [p["wanted"] for p in split["pages"]] == [600, 512] and split["kept"] == [
        "node0: 600 pages kept, more than the 512 asked (at_least; memory_hugepages_exact: true sets the count asked)"]


def test_exact_sets_the_count_asked_even_when_that_shrinks_the_pool(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 600})
    planned = hugepages.apply(None, {0: 512}, proc, sysfs, check_mode=True, exact=True)
    assert planned["changed"] is True and planned["pages"][0]["after"] == 512 and node_count(sysfs, 0) == 600
    hugepages.apply(None, {0: 512}, proc, sysfs, check_mode=False, exact=True)
    assert node_count(sysfs, 0) == 512


def test_per_node_accepts_every_spelling_of_a_node(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 0, 1: 0})
    result = hugepages.apply(None, {"node1": 512, 0: "256"}, proc, sysfs, check_mode=False)
    assert [p["name"] for p in result["pages"]] == ["node0", "node1"]
    assert (node_count(sysfs, 0), node_count(sysfs, 1)) == (256, 512)


def test_ledger_gets_the_total_and_every_node_whichever_is_written(tmp_path):
    # The total and the per-node files show one pool: a restore needs all of them as first seen.
    proc, sysfs = make_node_tree(tmp_path, {0: 0, 1: 0})
    record = hugepages.apply(None, {0: 8}, proc, sysfs, check_mode=True)["record"]
    assert record == [f"{proc}/sys/vm/nr_hugepages",
                      f"{sysfs}/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages",
                      f"{sysfs}/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"]
    assert hugepages.apply(16, {}, proc, sysfs, check_mode=True)["record"] == record


def test_check_mode_writes_nothing(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 8})
    result = hugepages.apply(None, {0: 16}, proc, sysfs, check_mode=True)
    assert result["changed"] is True and result["pages"][0]["after"] == 16
    assert node_count(sysfs, 0) == 8


def test_shortfall_restores_previous_counts_and_fails(tmp_path):
    # The kernel reserves what it can: model a node with room for only 100 pages.
    proc, sysfs = make_node_tree(tmp_path, {0: 10, 1: 10})

    def kernel_with_little_memory(path: str, value: int) -> None:
        Path(path).write_text(str(min(value, 100)))

    with pytest.raises(hugepages.HugepagesError) as failure:
        hugepages.apply(None, {0: 50, 1: 400}, proc, sysfs, check_mode=False, writer=kernel_with_little_memory)
    assert "node1: 100 of 400" in str(failure.value)
    assert "node0: 10, node1: 10" in str(failure.value)
    assert (node_count(sysfs, 0), node_count(sysfs, 1)) == (10, 10)


def test_both_total_and_per_node_is_refused(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 0})
    with pytest.raises(hugepages.HugepagesError, match="both set"):
        hugepages.apply(64, {0: 64}, proc, sysfs, check_mode=False)


def test_missing_node_is_named_with_the_nodes_that_exist(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 0})
    with pytest.raises(hugepages.HugepagesError, match=r"NUMA node 3 .*nodes on this host: node0"):
        hugepages.apply(None, {3: 64}, proc, sysfs, check_mode=False)


@pytest.mark.parametrize("bad", [True, -1, "many", 1.5])
def test_bad_counts_are_refused(tmp_path, bad):
    proc, sysfs = make_node_tree(tmp_path, {0: 0})
    with pytest.raises(hugepages.HugepagesError, match="not a page count"):
        hugepages.apply(None, {0: bad}, proc, sysfs, check_mode=False)


def test_total_refused_when_default_page_size_is_1g(tmp_path):
    proc, sysfs = make_node_tree(tmp_path, {0: 0}, default_kb=1048576)
    with pytest.raises(hugepages.HugepagesError, match="default huge page size here is 1048576 kB"):
        hugepages.apply(64, {}, proc, sysfs, check_mode=False)


@pytest.mark.slow
@pytest.mark.root
def test_real_kernel_round_trip_with_a_tiny_count():
    """vm.nr_hugepages is host-wide: move it by two pages and put it back."""
    path = Path("/proc/sys/vm/nr_hugepages")
    if not path.exists() or not __import__("os").access(path, __import__("os").W_OK):
        pytest.skip("needs root and hugetlbfs")
    before = int(path.read_text())
    try:
        result = hugepages.apply(before + 2, {}, "/proc", "/sys", check_mode=False)
        assert result["changed"] is True and int(path.read_text()) == before + 2
        assert hugepages.apply(before + 2, {}, "/proc", "/sys", check_mode=False)["changed"] is False
    finally:
        path.write_text(str(before))
    assert int(path.read_text()) == before


# --- kernel command line filters ------------------------------------------------------

# The kernel parameters of this dev machine (Firecracker guest, `cat /proc/cmdline`, cut before the
# init's own `--` arguments), and the GB200 kernel arguments of NVIDIA/skyhook-packages'
# nvidia-gb200-performance profile (anchors_provisioning.md section 9).
DEV_CMDLINE = ("mitigations=auto,no_guest_host,no_guest_guest console=ttyS0 quiet reboot=k panic=1 nomodule "
               "random.trust_cpu=1 swiotlb=noforce psi=1 nvproxy.enable=1 page_reporting.page_reporting_order=11 "
               "deferred_init=lazy nested_pvm=1 rcupdate.rcu_cpu_stall_cputime=1 cpuidle_haltpoll.force=1 "
               "haltpoll.guest_halt_poll_ns=0 sched_vcpu_pack=15 rdinit=/process_api")
GB200_ARGS = "iommu.passthrough=1 numa_balancing=disable hugepagesz=2M hugepages=5128 hugepagesz=1G hugepages=2"


def test_cmdline_without_huge_pages():
    assert memory_filters.memory_cmdline_hugepages(DEV_CMDLINE) == {}


def test_cmdline_pairs_each_count_with_the_size_before_it():
    assert memory_filters.memory_cmdline_hugepages(GB200_ARGS) == {2048: 5128, 1048576: 2}


def test_count_without_size_goes_to_the_default_size():
    assert memory_filters.memory_cmdline_hugepages("default_hugepagesz=1G hugepages=8") == {1048576: 8}
    assert memory_filters.memory_cmdline_hugepages("hugepages=8 ro") == {2048: 8}


def test_reboot_needed_until_the_kernel_booted_with_the_count():
    assert memory_filters.memory_boot_1g_differs(DEV_CMDLINE, 4) is True
    assert memory_filters.memory_boot_1g_differs(GB200_ARGS, 2) is False
    assert memory_filters.memory_boot_1g_differs(GB200_ARGS, 4) is True


def test_grub_args():
    assert memory_filters.memory_grub_args(4) == "hugepagesz=1G hugepages=4"
    assert memory_filters.memory_grub_args(0) == ""
    with pytest.raises(Exception, match="not a page count"):
        memory_filters.memory_grub_args(True)


def test_defaults_match_argument_specs():
    defaults = yaml.safe_load((ROOT / "roles/memory/defaults/main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles/memory/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert {name: spec.get("default") for name, spec in options.items()} == defaults


# --- the GRUB drop-in, sourced the way grub-mkconfig sources it -----------------------------

def render_grub_dropin(os_family: str, count: int) -> str:
    import jinja2

    grub = yaml.safe_load((ROOT / "roles/memory/vars/main.yml").read_text())["__memory_grub"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "roles/memory/templates")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    env.filters["tunefleet.gpu_node.memory_grub_args"] = memory_filters.memory_grub_args
    return env.get_template("grub-tunefleet.cfg.j2").render(
        ansible_managed="Ansible managed", ansible_facts={"os_family": os_family},
        __memory_grub=grub, memory_hugepages_1g=count)


@pytest.mark.parametrize(("os_family", "variable", "before", "after"), [
    ("Debian", "GRUB_CMDLINE_LINUX_DEFAULT", "quiet splash", "quiet splash hugepagesz=1G hugepages=4"),
    ("Debian", "GRUB_CMDLINE_LINUX_DEFAULT", "", "hugepagesz=1G hugepages=4"),
    ("RedHat", "GRUB_CMDLINE_LINUX", "crashkernel=auto rhgb quiet",
     "crashkernel=auto rhgb quiet hugepagesz=1G hugepages=4"),
])
def test_grub_dropin_appends_when_sourced_by_sh(tmp_path, os_family, variable, before, after):
    import subprocess

    dropin = tmp_path / "90-tunefleet.cfg"
    dropin.write_text(render_grub_dropin(os_family, 4))
    # grub-mkconfig runs under `set -e` and sources /etc/default/grub, then (Debian) grub.d/*.cfg.
    script = f'set -e\n{variable}="{before}"\n. {dropin}\nprintf "%s" "${variable}"\n'
    shown = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert shown == after


def test_redhat_source_line_is_harmless_without_the_dropin(tmp_path):
    import subprocess

    tasks = yaml.safe_load((ROOT / "roles/memory/tasks/kernel_cmdline.yml").read_text())
    line = next(t for t in tasks if "ansible.builtin.lineinfile" in t)["ansible.builtin.lineinfile"]["line"]
    line = line.replace("{{ __memory_grub_dropin }}", str(tmp_path / "absent.cfg"))
    default_grub = tmp_path / "grub"
    default_grub.write_text(f'GRUB_CMDLINE_LINUX="quiet"\n{line}\n')
    # Sourced as the last line under `set -e`: a missing drop-in must not abort grub2-mkconfig.
    result = subprocess.run(["/bin/sh", "-c", f'set -e\n. {default_grub}\necho "ok $GRUB_CMDLINE_LINUX"'],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok quiet"
