"""The root re-review of 2026-12-07 (issue 53 items 7-9): each attack planted as another user (`nobody`, files it
owns or can write through an ACL), and each test asserts that the attacker's marker never appears, not only that
something was refused."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

from other_user import give, needs_root, shared_dir  # noqa: E402

from verify.runner import KEPT_SETTINGS, clean_env, run_command  # noqa: E402

# Settings that make the process that reads them load a library or read more settings from a file
# (docs/security.md rule 3): never passed on, whatever the caller's environment holds.
LOADERS = ("CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
           "NCCL_CONF_FILE", "UCX_MODULE_DIR", "OMP_TOOL_LIBRARIES", "NVSHMEM_BOOTSTRAP_PLUGIN", "NCCL_DEBUG_FILE",
           "NCCL_TOPO_DUMP_FILE", "CUDA_CACHE_PATH", "NCCL_GRAPH_DUMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


@needs_root
@pytest.mark.parametrize("name", LOADERS)
def test_a_library_named_in_the_callers_environment_never_reaches_a_tool_or_engine(tmp_path, monkeypatch, name):
    from verify.engine import engine_argv, engine_env

    planted = shared_dir(tmp_path / "nobody")
    library = Path(planted, "MARKER-libinject.so")
    library.write_bytes(b"\x7fELF")
    give(library)
    monkeypatch.setenv(name, str(library))
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # a named setting the operator set on purpose: kept
    tool = run_command(["/usr/bin/env"])
    engine = run_command(engine_argv("json.tool", ["--help"])[:3] + ["-c", "import os; print(dict(os.environ))"],
                         env=engine_env())
    assert tool.ok and engine.ok, (tool.stderr, engine.stderr)
    for out in (tool.stdout, engine.stdout):
        assert "MARKER-libinject" not in out and name not in out
    assert "NCCL_DEBUG=WARN" in tool.stdout


def test_the_kept_settings_are_names_never_a_prefix(monkeypatch):
    for name in LOADERS:
        monkeypatch.setenv(name, "/x")
        assert name not in KEPT_SETTINGS
    monkeypatch.setenv("NCCL_ANYTHING_NEW", "1")
    assert "NCCL_ANYTHING_NEW" not in clean_env() and all(name not in clean_env() for name in LOADERS)
    assert all(name.isupper() or name == "LANG" for name in KEPT_SETTINGS)


# ---- node-reported addresses before a launcher's argv (verify.safe_io.check_address) -----------------------------

@needs_root
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_a_node_reported_address_never_adds_settings_to_a_launcher(tmp_path, monkeypatch, launcher):
    """The first node's self-reported address went into `srun --export=ALL,MASTER_ADDR=...` unquoted: a comma in it
    added LD_PRELOAD of nobody's library to every rank. Now no launcher starts, and the host's record says why."""
    import json

    from verify import runner
    from verify.fleet import multinode

    planted = shared_dir(tmp_path / "nobody")
    library = Path(planted, "MARKER-preload.so")
    library.write_bytes(b"\x7fELF")
    give(library)
    started: list = []
    monkeypatch.setattr(runner, "run_command", lambda argv, **kw: started.append(argv) or runner.CommandOutput(
        list(argv), 0, "", "", 0.0))
    out = tmp_path / "crossnode.json"
    hostile = f"10.0.0.1,LD_PRELOAD={library}"
    assert multinode.main(["launch", f"--launcher={launcher}", "--nnodes=2", "--node-rank=0", "--backend=gloo",
                           "--nproc-per-node=1", f"--master-addr={hostile}", "--hosts=n1,n2",
                           f"--out={out}", f"--result-file={tmp_path}/m.json"]) == 0
    assert not any("MARKER-preload" in " ".join(map(str, argv)) for argv in started)
    record = json.loads(out.read_text())[0]
    assert record["status"] == "ERROR" and "--master-addr" in record["reason"]


@pytest.mark.parametrize("value", ["10.0.0.1,LD_PRELOAD=/x", "-oProxyCommand=x", "a b", "", "fe80::1%eth0,x",
                                   "host\n", "x" * 300, "10.0.0.1:29500", "a..b", "\u0661.1.1.1"])
def test_an_address_that_is_no_address_is_refused_naming_it(value):
    from verify.safe_io import check_address

    with pytest.raises(ValueError, match="--master-addr"):
        check_address(value, "--master-addr")


def test_addresses_and_host_names_pass():
    from verify.safe_io import check_address

    for value in ("10.0.0.1", "fd00::1", "gpu-node-01.cluster.local", "node_7", "localhost"):
        assert check_address(value, "x") == value


# ---- control characters in what tunefleet prints (verify.safe_io.for_terminal) ----------------------------------

TITLE = "\x1b]0;MARKER-title\x07\x1b[2J\u202e"


@needs_root
def test_another_users_process_name_on_a_busy_gpu_reaches_the_terminal_escaped(tmp_path):
    """nobody's job on a GPU, named with a sequence that retitles the window and clears the screen: the busy-GPU
    row of the local run's table shows it escaped."""
    import subprocess

    from verify.bench.engine_session import BusyGpu, busy_row
    from verify.facts.gpu_processes import parse_compute_apps
    from verify.report import build_report
    from verify.report.terminal import render

    job = subprocess.Popen([TITLE, "30"], executable="/bin/sleep", user=65534, group=65534, extra_groups=[])
    try:
        name = Path(f"/proc/{job.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        listing = ("gpu_bus_id, pid, process_name, used_memory [MiB]\n"
                   f"00000000:18:00.0, {job.pid}, {name}, 1024 MiB\n")
    finally:
        job.kill()
        job.wait()
    assert name == TITLE
    processes = parse_compute_apps(listing)["00000000:18:00.0"]
    row = busy_row("bench.gpu", BusyGpu(0, "00000000:18:00.0", processes))
    report = build_report({}, {"host": "n1"}, [row], {})
    for colour in (False, True):
        shown = render(report, width=120, colour=colour)
        assert "\x07" not in shown and "\u202e" not in shown and "MARKER-title" in shown
        assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\\x1b]0;MARKER-title\\x07" in shown


def test_a_nodes_report_reaches_the_operators_terminal_escaped(tmp_path, capsys):
    """A node's report (check id, reason) and its archive's member names, printed by the fleet play's steps."""
    import argparse
    import io
    import json
    import tarfile

    from verify.fleet import unpack
    from verify.fleet.report import main as report_main

    run = tmp_path / "run"
    (run / "n1").mkdir(parents=True)
    report = {"host": "n1", "results": [{"check_id": "x\x1b[2Jy", "role": "config", "status": "FAIL",
                                         "expected": "1", "observed": "2", "reason": f"bad {TITLE}"}]}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("report.json", json.dumps(report).encode()), (f"evil{TITLE}", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (run / "n1" / unpack.ARCHIVE).write_bytes(buffer.getvalue())
    assert unpack.main([str(run)]) == 0
    assert report_main(argparse.Namespace(directory=str(run), format="json", out=None)) == 1
    printed = capsys.readouterr()
    for text in (printed.out, printed.err):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "MARKER-title" in printed.out and "x\\x1b[2Jy" in printed.out


# ---- POSIX ACLs: the ledger's own rule, default ACLs (verify.safe_io, plugins/module_utils/ledger_core) ----------

def _acl(*entries: tuple) -> bytes:
    import struct

    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in sorted(entries))


NOBODY_RW = ((0x01, 7, 0xFFFFFFFF), (0x02, 7, 65534), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
             (0x20, 5, 0xFFFFFFFF))


def _ledger_core():
    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / ".cache" / "collections"))
    from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core

    return ledger_core


def test_the_ledgers_acl_rule_is_verifys():
    from hypothesis import given
    from hypothesis import strategies as st

    from verify.safe_io import acl_writers

    core = _ledger_core()
    entry = st.tuples(st.sampled_from([1, 2, 4, 8, 0x10, 0x20]), st.integers(0, 7),
                      st.sampled_from([0, 65534, 1000, 0xFFFFFFFF, os.geteuid()]))

    @given(st.lists(entry, max_size=6), st.booleans(), st.binary(max_size=12))
    def same(entries, default, junk):
        for raw in (_acl(*entries), junk):
            assert core.acl_writers(raw, default) == acl_writers(raw, default)

    same()


@needs_root
def test_a_root_ledger_another_user_writes_through_an_acl_is_never_restored_from(reachable):
    """nobody rewrites root's ledger (root:root 0644, a named ACL entry granting nobody write) to make restore
    write a setuid copy of a shell: the restore refuses the ledger and the file never appears."""
    import base64
    import json

    from other_user import run_as_other

    core = _ledger_core()
    state = reachable / "var-lib-tunefleet"
    state.mkdir(mode=0o755)
    ledger_path = state / "ledger.json"
    ledger_path.write_text(json.dumps(core.empty_ledger()))
    ledger_path.chmod(0o644)
    os.setxattr(str(ledger_path), "system.posix_acl_access", _acl(*NOBODY_RW))
    target = reachable / "MARKER-setuid-shell"
    forged = core.empty_ledger()
    forged["files"][str(target)] = {"state": "present", "mode": "4755", "uid": 0, "gid": 0,
                                    "content_b64": base64.b64encode(b"#!/bin/sh\n").decode(), "sha256": "x"}
    writer = run_as_other(f"printf '%s' '{json.dumps(forged)}' > '{ledger_path}'")
    assert writer.wait(timeout=30) == 0 and "MARKER-setuid-shell" in ledger_path.read_text(), "the ACL grants write"
    with pytest.raises(core.LedgerError, match="POSIX ACL by user 65534"):
        core.load_ledger("/", str(ledger_path))
    assert not target.exists()


@needs_root
def test_an_import_directory_with_a_default_acl_for_another_user_is_refused(reachable):
    """A directory root owns, mode 0755, whose default ACL makes every file later installed in it writable by
    nobody (`setfacl -d -m u:nobody:rwx`): refused as an import directory; nothing from it runs."""
    from verify.safe_io import UnsafePathError, trusted_import_dirs

    site = reachable / "site-packages"
    site.mkdir(mode=0o755)
    os.setxattr(str(site), "system.posix_acl_default", _acl(*NOBODY_RW))
    (site / "sitecustomize.py").write_text("open('MARKER', 'w')\n")
    with pytest.raises(UnsafePathError, match="default ACL user 65534"):
        trusted_import_dirs([str(site)])


# ---- the inventory walk through a symlinked sub-directory (verify.fleet.run.check_inventory_trusted) -------------

@needs_root
def test_another_users_vars_file_in_a_symlinked_inventory_directory_never_runs(reachable):
    """group_vars is root's link to root's directory, which holds nobody's vars file with a lookup('pipe'):
    Ansible reads through the link; the walk did not, and the pipe ran as root."""
    from verify.fleet.run import InventoryError, check_inventory

    marker = reachable / "MARKER-pipe"
    real = reachable / "shared-vars"
    real.mkdir(mode=0o755)
    planted = real / "all.yml"
    planted.write_text(f"pwned: \"{{{{ lookup('pipe', 'touch {marker}') }}}}\"\n")
    give(planted)
    inventory = reachable / "inventory"
    inventory.mkdir()
    (inventory / "hosts.ini").write_text("node1 ansible_connection=local\n")
    (inventory / "group_vars").symlink_to(real)
    with pytest.raises(InventoryError, match="all.yml.*owned by uid 65534"):
        check_inventory(str(inventory))
    assert not marker.exists()


# ---- --root: a link at the tree's own path (verify.safe_io.check_root_tree) --------------------------------------

@needs_root
def test_a_root_tree_that_is_another_users_link_is_refused_and_nothing_of_its_target_is_read(reachable, tmp_path,
                                                                                             capsys):
    """`verify --local --root /tmp/capture` where nobody made /tmp/capture a link to a tree it controls (or to
    root's files): refused by name before anything is read; the marker in the target never reaches a report."""
    from verify import cli

    target = shared_dir(reachable / "nobody-tree")
    (target / "etc").mkdir()
    (target / "etc" / "hostname").write_text("MARKER-hostname\n")
    (target / "proc").mkdir()
    (target / "proc" / "cmdline").write_text("MARKER-cmdline\n")
    link = reachable / "capture"
    link.symlink_to(target)
    give(link)
    out = tmp_path / "out"
    code = cli.main(["verify", "--local", "--root", str(link), "--out", str(out), "--no-bench", "--no-history",
                     "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"--root {link}" in err and "symbolic link" in err
    assert not any("MARKER" in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    from verify.node import Node

    # read by descriptor: a link swapped in after the check is not followed (the file reads as absent)
    assert Node(root=str(link)).read_value("/etc/hostname") is None
    assert Node(root=str(target)).read_value("/etc/hostname") == "MARKER-hostname"


# ---- nothing runs before it is checked: the interpreter finder (verify.fleet.node_python, find_python.yml) --------

def _venv(where: Path) -> tuple:
    import subprocess

    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    site = next(where.glob("lib/python*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("__version__ = 'made by the test'\n")
    return where / "bin" / "python3", site


def _finder_argv() -> list:
    """The finder's command exactly as find_python.yml spells it, its variables filled in from the role's vars."""
    import yaml

    repo = Path(__file__).resolve().parents[2]
    task = yaml.safe_load((repo / "roles/verify_node/tasks/find_python.yml").read_text())[0]
    role_vars = yaml.safe_load((repo / "roles/verify_node/vars/main.yml").read_text())
    argv = task["ansible.builtin.command"]["argv"][:5]
    assert argv[0] == "{{ __verify_node_finder_python }}" and argv[1:5] == ["-I", "-S", "-B", "-c"]
    return [role_vars["__verify_node_finder_python"], "-I", "-S", "-B", "-c", role_vars["__verify_node_isolated"],
            str(repo), ""]


@needs_root
def test_a_pth_another_user_plants_in_a_venv_never_runs_in_the_finder(reachable, tmp_path):
    """verify_node_python is a venv whose site-packages nobody can write through an ACL; nobody plants a .pth.
    The finder ran as that venv's python, with site, before anything was checked: the .pth ran as root. Now the
    finder is the system Python with -I -S, and the candidate is refused before it runs."""
    import json
    import subprocess

    from other_user import run_as_other

    python, site = _venv(reachable / "venv")
    os.setxattr(str(site), "system.posix_acl_access", _acl(*NOBODY_RW))
    marker = reachable / "MARKER-pth"
    plant = run_as_other(f"printf '%s\\n' \"import os; os.close(os.open('{marker}', os.O_CREAT | os.O_WRONLY))\" "
                         f"> '{site}/zz-evil.pth'")
    assert plant.wait(timeout=30) == 0 and (site / "zz-evil.pth").exists(), "the ACL grants write"
    out = tmp_path / "python.json"
    done = subprocess.run(_finder_argv() + ["verify.fleet.node_python", f"--wanted={python}", f"--out={out}"],
                          capture_output=True, text=True, timeout=300, cwd="/", check=False)
    assert done.returncode == 0, done.stderr
    tried = json.loads(out.read_text())["tried"]
    assert tried[0]["outcome"] == "refused" and "POSIX ACL by user 65534" in tried[0]["detail"]
    assert not marker.exists()


@needs_root
def test_a_directory_a_pth_adds_is_checked_before_site_runs(reachable):
    """A root venv, trusted; its .pth adds nobody's directory, where nobody put a sitecustomize.py. Probing the
    candidate with site (step 4) would run it: the directory is walked first (step 3) and refused."""
    from verify.fleet.node_python import try_candidate

    python, site = _venv(reachable / "venv")
    theirs = shared_dir(reachable / "nobody-lib")
    marker = reachable / "MARKER-sitecustomize"
    planted = theirs / "sitecustomize.py"
    planted.write_text(f"open({str(marker)!r}, 'w')\n")
    give(planted)
    (site / "extra.pth").write_text(f"{theirs}\n")
    found = try_candidate(str(python), [])
    assert found["outcome"] == "refused" and "its site directories" in found["detail"]
    assert "uid 65534" in found["detail"] and not marker.exists()


@needs_root
def test_a_package_another_user_can_write_inside_a_root_import_directory_is_never_imported_by_the_hooks(reachable):
    """The hooks' launcher imports yaml from an import directory root owns (0755); the yaml package in it was
    installed with umask 0 and nobody rewrote its __init__.py. Import trust stopped at the directory: now the
    package is walked and the hook refuses to start (exit 2, could not check), nothing of nobody's runs."""
    import subprocess

    from verify.isolated import HOOK_BOOTSTRAP

    lib = reachable / "site-packages"
    lib.mkdir(mode=0o755)
    package = lib / "yaml"
    package.mkdir()
    package.chmod(0o777)
    marker = reachable / "MARKER-yaml"
    from other_user import run_as_other

    plant = run_as_other(f"echo \"open('{marker}', 'w')\" > '{package}/__init__.py'")
    assert plant.wait(timeout=30) == 0
    repo = Path(__file__).resolve().parents[2]
    # The launcher's own call (HOOK_BOOTSTRAP) with a module that imports yaml at once, as a hook rendering its spec
    importing = HOOK_BOOTSTRAP.replace("'verify'", "'yaml'")
    assert importing != HOOK_BOOTSTRAP
    done = subprocess.run([sys.executable, "-I", "-c", importing, str(repo), str(lib)],
                          capture_output=True, text=True, timeout=120, cwd="/", check=False)
    assert done.returncode == 2 and f"{package}" in done.stderr and "writable by everyone" in done.stderr
    assert not marker.exists()
