"""The verify package as one tarball for nodes: what travels and what stays behind."""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

from verify.fleet.bundle import build, main

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_bundle_runs_verify_on_a_bare_python_without_the_checkout(tmp_path):
    archive = build(ROOT, tmp_path / "bundle.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        assert all(m.uid == 0 and m.uname == "root" for m in tar.getmembers())
        tar.extractall(tmp_path / "node")
    assert "verify/cli.py" in names and "templates/desired_state.json.j2" in names
    assert "plugins/module_utils/kernel_rules.py" in names  # verify.kernel_rules loads it from next to verify/
    assert "plugins/module_utils/pci_config.py" in names  # verify.pci_config likewise
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # -I: isolated mode, so neither the checkout nor the venv's editable install is importable.
    done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, '.'); "
                           "import verify, verify.noderun, verify.checks, verify.kernel_rules as k; "
                           "print(verify.__file__); "
                           "print(k._home.__file__); print(sorted(k.parse_cpulist('0-7:1/2')))"],
                          cwd=tmp_path / "node", capture_output=True, text=True, check=True)
    package, rules, cpus = done.stdout.strip().splitlines()
    assert package.startswith(str(tmp_path / "node"))
    assert rules == str(tmp_path / "node" / "plugins" / "module_utils" / "kernel_rules.py")
    assert cpus == "[0, 2, 4, 6]"


def test_a_home_without_the_package_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNEFLEET_HOME", str(tmp_path))
    assert main([str(tmp_path / "b.tar.gz")]) == 2
    assert "has no verify, templates" in capsys.readouterr().err
