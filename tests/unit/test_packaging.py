"""Every install form the README documents, built clean from the sources, works alone from outside the
repository: `tunefleet verify -i`, the site playbook (check mode) and the restore playbook (check mode).

- The collection tunefleet.gpu_node (`ansible-galaxy collection build`, installed with `-p DIR`) runs its
  site, verify and restore playbooks by their collection names, in a virtualenv that has the runtime
  dependencies but not the tunefleet package: what the verify playbook runs must come from the collection.
- The checkout with only `pip install -e .` (no `make`: no .cache/collections link): `tunefleet verify -i`,
  `tunefleet site` and `tunefleet restore`, no TUNEFLEET_HOME.
- The wheel (`pip wheel`, build isolation on, so pyproject's build requirements are what is used) runs
  `tunefleet spec`, `verify --local` and `profiles`, and the three fleet commands with TUNEFLEET_HOME at
  the installed collection and at a checkout that never ran `make`; no ANSIBLE_COLLECTIONS_PATH in either.

The artifacts are built once and shared: one wheel, one collection, one virtualenv (the editable install
is replaced by the wheel in it). The fleet commands run against this machine over a local connection with
the collection's inventory/local and no benchmarks (`verify_benchmarks: []`): what is proven is that each
form finds its playbooks, roles, modules and filters, not the benchmarks (test_bench_* do those).
The end-to-end tests are marked slow (`pytest -s` prints each step and its time); most of it is the
eleven playbook runs (site ~10-45 s in check mode, verify ~15-35 s, restore ~5-10 s on the shared
2-core CI machine, more under load) and installing ansible into the fresh virtualenv (~15 s with pip's
wheel cache warm). Byte-compiling ansible would add ~30 s: --no-compile.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify.desired import render_spec

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# What a build must not see from the working tree (the checkout's own environments and outputs).
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", ".cache", "reports", "build", "dist", "*.egg-info",
                                     "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".hypothesis")


def run(argv: list, cwd: Path, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    # Where the time goes (pytest -s shows it): this test is slow and should stay measurable.
    print(f"[packaging] {time.monotonic() - started:5.1f}s  {' '.join(Path(str(a)).name for a in argv[:4])}")
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def clean_env(cwd: Path, **extra: str) -> dict:
    """A user's shell, not this test run's: nothing from the checkout (ANSIBLE_CONFIG, PYTHONPATH,
    TUNEFLEET_HOME, the repo's venv on PATH) leaks into the installed forms."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(cwd)),
           "LANG": "C.UTF-8", "PWD": str(cwd), "ANSIBLE_NOCOLOR": "1",
           # verify keeps a history database; a test's runs go to its own directory, not the machine's.
           "TUNEFLEET_HISTORY": str(cwd / "history.sqlite")}
    env.update(extra)
    return env


def copy_sources(dest: Path) -> Path:
    """What a clean clone holds (plus uncommitted edits): the files git tracks or would track."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True)
    if listed.returncode != 0:  # not a git checkout (an unpacked source tree): copy minus outputs
        shutil.copytree(ROOT, dest, ignore=NOT_SOURCES)
        return dest
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def runtime_requirements(wheel: Path) -> list:
    """Requires-Dist of the wheel without the extras (test, torch): the runtime a user gets."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:") and ";" not in line]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sources built into a wheel and a collection, in a directory removed after this module: it holds
    a venv with every dependency (~300 MB), and pytest keeps its last three runs' temporary directories."""
    work = tmp_path_factory.mktemp("packaging")
    try:
        yield _build(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build(work: Path) -> SimpleNamespace:
    src = copy_sources(work / "src")
    dist = work / "dist"
    env = clean_env(work)
    # Not -q, not -v: pip then shows the warnings the build backend emits, as a user sees them.
    wheel_build = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, src], work, dict(os.environ))
    run([BIN / "ansible-galaxy", "collection", "build", "--output-path", dist, src], work, env)
    (wheel,) = dist.glob("tunefleet-*.whl")
    (collection,) = dist.glob("tunefleet-gpu_node-*.tar.gz")
    log = wheel_build.stdout + wheel_build.stderr
    return SimpleNamespace(work=work, src=src, wheel=wheel, collection=collection, build_log=log)


@pytest.fixture(scope="module")
def venv(built) -> Path:
    """A fresh virtualenv (no system site-packages) with the wheel's runtime dependencies only."""
    venv = built.work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], built.work, clean_env(built.work))
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    # pip from this environment installs into the new one (--python): no pip bootstrap there.
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-compile"]
    run([*pip, *runtime_requirements(built.wheel)], built.work, dict(os.environ), timeout=600)
    return venv


@pytest.fixture(scope="module")
def collection_runs(built, venv, tmp_path_factory) -> SimpleNamespace:
    """Both collection playbooks, run before the wheel is installed into the same virtualenv."""
    outside = tmp_path_factory.mktemp("ansible-user")
    assert ROOT not in outside.parents
    collections = outside / "collections"
    env = clean_env(outside, PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                    ANSIBLE_COLLECTIONS_PATH=str(collections))
    importable = subprocess.run([venv / "bin" / "python", "-c", "import verify"], cwd=outside, env=env,
                                capture_output=True)
    run(["ansible-galaxy", "collection", "install", "-p", collections, built.collection], outside, env)
    # The collection's built-in inventory: this machine over a local connection, with the
    # playbook's own interpreter (the virtualenv's) and no cluster NIC or NVMe disk required.
    inventory = collections / "ansible_collections" / "tunefleet" / "gpu_node" / "inventory" / "local"
    site = run(["ansible-playbook", "-i", inventory, "tunefleet.gpu_node.site", "--check", "--diff"], outside, env)
    reports = outside / "reports"
    verify = run(["ansible-playbook", "-i", inventory, "tunefleet.gpu_node.verify",
                  "-e", f"verify_node_report_dir={reports}", "-e", '{"verify_benchmarks": []}'], outside, env)
    restore = run(["ansible-playbook", "-i", inventory, "tunefleet.gpu_node.restore", "--check"], outside, env)
    return SimpleNamespace(outside=outside, collections=collections, reports=reports, site=site, verify=verify,
                           restore=restore, verify_importable=importable.returncode == 0,
                           home=collections / "ansible_collections" / "tunefleet" / "gpu_node")


def fleet_inventory(collection_runs) -> Path:
    """The collection's inventory/local (this machine, its own interpreter) with no benchmarks."""
    inventory = collection_runs.outside / "inventory"
    if not inventory.exists():
        shutil.copytree(collection_runs.home / "inventory" / "local", inventory)
        (inventory / "host_vars").mkdir()
        (inventory / "host_vars" / "localhost.yml").write_text("verify_benchmarks: []\n")
    return inventory


def fleet_commands(tunefleet: Path, collection_runs, form: str, **extra: str) -> SimpleNamespace:
    """`tunefleet verify -i`, `site --check --diff` and `restore --check` of one install form, each started in a
    directory of its own outside the checkout, with only the caller's shell environment plus `extra`."""
    inventory = fleet_inventory(collection_runs)
    where = collection_runs.outside / form
    where.mkdir()
    env = clean_env(where, PATH=f"{tunefleet.parent}:/usr/local/bin:/usr/bin:/bin", **extra)
    started = time.monotonic()
    verify = subprocess.run([tunefleet, "verify", "-i", inventory, "--out", "reports", "--quiet"], cwd=where, env=env,
                            capture_output=True, text=True, timeout=600)
    print(f"[packaging] {time.monotonic() - started:5.1f}s  tunefleet verify -i ({form}: exit {verify.returncode})")
    site = run([tunefleet, "site", "-i", inventory, "--check", "--diff"], where, env, timeout=600)
    restore = run([tunefleet, "restore", "-i", inventory, "--check"], where, env)
    reports = list((where / "reports").glob("*/fleet_report.json"))
    return SimpleNamespace(verify=verify, site=site, restore=restore, fleet_reports=reports)


def assert_fleet_commands_ran(form: SimpleNamespace) -> None:
    # Findings (1) or a check that could not run (3) on an untuned machine; never bad input (2) or a crash.
    assert form.verify.returncode in (0, 1, 3), form.verify.stdout[-3000:] + form.verify.stderr[-3000:]
    assert "No filter named" not in form.verify.stdout + form.verify.stderr
    (report,) = form.fleet_reports
    fleet = json.loads(report.read_text())
    assert [entry["host"] for entry in fleet["hosts"]] == ["localhost"]
    node = json.loads((report.parent / "localhost" / "report.json").read_text())
    assert {result["role"] for result in node["results"]} >= {"sysctl", "memory", "limits"}
    site_recap = form.site.stdout[form.site.stdout.rindex("PLAY RECAP"):]
    assert "failed=0" in site_recap and "unreachable=0" in site_recap
    assert "tunefleet.gpu_node.ledger" not in form.site.stderr  # no "couldn't resolve module" for our modules
    restore_recap = form.restore.stdout[form.restore.stdout.rindex("PLAY RECAP"):]
    assert "failed=0" in restore_recap


@pytest.fixture(scope="module")
def editable_runs(built, venv, collection_runs) -> SimpleNamespace:
    """The checkout with only `pip install -e .`: no make, so no .cache/collections link, no TUNEFLEET_HOME.
    Uninstalled afterwards: the wheel goes into the same virtualenv."""
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python"]
    run([*pip, "install", "-q", "--no-compile", "--no-deps", "-e", built.src], built.work, dict(os.environ))
    try:
        assert not (built.src / ".cache").exists()
        return fleet_commands(venv / "bin" / "tunefleet", collection_runs, "editable")
    finally:
        run([*pip, "uninstall", "-y", "-q", "tunefleet"], built.work, dict(os.environ))


@pytest.fixture(scope="module")
def wheel_venv(built, venv, collection_runs, editable_runs) -> Path:
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-compile",
         "--no-deps", built.wheel], built.work, dict(os.environ))
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "check"], built.work, dict(os.environ))
    return venv


def warnings_in(text: str) -> list:
    return [line for line in text.splitlines() if "WARNING" in line or "DEPRECATION" in line]


@pytest.mark.slow
def test_build_has_no_warning(built) -> None:
    # setuptools warned (3 times a build) that the table form of `project.license` is deprecated.
    assert "BuildBackendWarning" not in built.build_log
    assert "deprecated" not in built.build_log.lower()


@pytest.mark.slow
def test_collection_site_runs_in_check_mode_from_outside_the_repository(collection_runs) -> None:
    # Nothing imported verify from the virtualenv: the playbooks only had the collection's copy.
    assert not collection_runs.verify_importable
    out = collection_runs.site.stdout
    assert "gpu_node/playbooks/site.yml" in out or "Tune GPU nodes" in out
    assert "tunefleet.gpu_node.sysctl" in out  # the roles ran by their collection names
    recap = out[out.rindex("PLAY RECAP"):]
    assert "failed=0" in recap and "unreachable=0" in recap
    # "noop task does not support when conditional" came from the roles' defaults entry points.
    assert warnings_in(out + collection_runs.site.stderr) == []


@pytest.mark.slow
def test_collection_verify_runs_from_outside_the_repository(collection_runs) -> None:
    assert warnings_in(collection_runs.verify.stdout + collection_runs.verify.stderr) == []
    (run_dir,) = [path for path in collection_runs.reports.iterdir() if path.is_dir()]
    node = json.loads((run_dir / "localhost" / "report.json").read_text())
    assert {result["role"] for result in node["results"]} >= {"sysctl", "memory", "limits"}
    fleet = json.loads((run_dir / "fleet_report.json").read_text())
    assert "localhost" in json.dumps(fleet["hosts"])


@pytest.mark.slow
def test_collection_restore_runs_from_outside_the_repository(collection_runs) -> None:
    recap = collection_runs.restore.stdout[collection_runs.restore.stdout.rindex("PLAY RECAP"):]
    assert "failed=0" in recap and "unreachable=0" in recap


@pytest.mark.slow
def test_a_checkout_with_only_pip_install_e_runs_the_fleet_commands(editable_runs) -> None:
    assert_fleet_commands_ran(editable_runs)


@pytest.mark.slow
def test_wheel_with_an_installed_collection_runs_the_fleet_commands(wheel_venv, collection_runs) -> None:
    """`ansible-galaxy collection install -p DIR` and TUNEFLEET_HOME at it; no ANSIBLE_COLLECTIONS_PATH."""
    form = fleet_commands(wheel_venv / "bin" / "tunefleet", collection_runs, "wheel-collection",
                          TUNEFLEET_HOME=str(collection_runs.home))
    assert_fleet_commands_ran(form)


@pytest.mark.slow
def test_wheel_with_a_checkout_that_never_ran_make_runs_the_fleet_commands(built, wheel_venv, collection_runs) -> None:
    assert not (built.src / ".cache").exists()
    form = fleet_commands(wheel_venv / "bin" / "tunefleet", collection_runs, "wheel-checkout",
                          TUNEFLEET_HOME=str(built.src))
    assert_fleet_commands_ran(form)


@pytest.mark.slow
def test_wheel_spec_is_the_checkouts_spec(wheel_venv, tmp_path) -> None:
    spec = run([wheel_venv / "bin" / "tunefleet", "spec"], tmp_path, clean_env(tmp_path))
    # Rendered from the role defaults the wheel carries, equal to the checkout's rendering.
    assert json.loads(spec.stdout) == render_spec()


@pytest.mark.slow
def test_wheel_verifies_this_machine_from_outside_the_repository(wheel_venv, tmp_path) -> None:
    done = subprocess.run([wheel_venv / "bin" / "tunefleet", "verify", "--local", "--out", "reports"], cwd=tmp_path,
                          env=clean_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1, 3), done.stderr  # findings, not a crash
    assert "Traceback" not in done.stderr
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert {result["role"] for result in report["results"]} >= {"sysctl", "memory", "limits"}
    # The HTML report renders from the templates the wheel carries.
    assert "<html" in (tmp_path / "reports" / "report.html").read_text().lower()


@pytest.mark.slow
def test_wheel_alone_refuses_a_fleet_run_clearly(wheel_venv, tmp_path) -> None:
    # A fleet run needs the playbooks, which only a checkout or the collection has.
    (tmp_path / "hosts").write_text("localhost ansible_connection=local\n")
    done = subprocess.run([wheel_venv / "bin" / "tunefleet", "verify", "-i", "hosts"], cwd=tmp_path,
                          env=clean_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "playbooks/verify.yml not found" in done.stderr and "TUNEFLEET_HOME" in done.stderr


@pytest.mark.slow
def test_wheel_lists_the_shipped_profiles(wheel_venv, tmp_path) -> None:
    listed = run([wheel_venv / "bin" / "tunefleet", "profiles"], tmp_path, clean_env(tmp_path)).stdout
    shipped = sorted(path.stem for path in (ROOT / "verify" / "profiles").glob("*.json"))
    assert shipped
    for name in shipped:
        assert name in listed


def load_desired_from(package: Path):
    """verify/desired.py as it would sit in another layout (a wheel's site-packages, a collection)."""
    package.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "verify" / "desired.py", package / "desired.py")
    spec = importlib.util.spec_from_file_location(f"desired_{abs(hash(package))}", package / "desired.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_found_in_a_checkout_a_wheel_and_through_tunefleet_home(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TUNEFLEET_HOME", raising=False)
    marker = "templates/desired_state.json.j2"
    checkout = tmp_path / "checkout"
    (checkout / "templates").mkdir(parents=True)
    (checkout / marker).write_text("{}")
    assert load_desired_from(checkout / "verify").project_root() == checkout
    # An installed wheel: site-packages has no templates/, the package's _data/ has them.
    site = tmp_path / "site-packages"
    (site / "verify" / "_data" / "templates").mkdir(parents=True)
    (site / "verify" / "_data" / marker).write_text("{}")
    wheel = load_desired_from(site / "verify")
    assert wheel.project_root() == site / "verify" / "_data"
    monkeypatch.setenv("TUNEFLEET_HOME", str(checkout))
    assert wheel.project_root() == checkout
    # The caller's cwd never counts, even when it looks like a checkout.
    monkeypatch.delenv("TUNEFLEET_HOME")
    monkeypatch.chdir(checkout)
    assert load_desired_from(tmp_path / "bare" / "verify").project_root() == tmp_path / "bare"
