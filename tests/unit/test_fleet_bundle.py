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
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # -I: isolated mode, so neither the checkout nor the venv's editable install is importable.
    done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, '.'); "
                           "import verify, verify.fleet.noderun; print(verify.__file__)"],
                          cwd=tmp_path / "node", capture_output=True, text=True, check=True)
    assert done.stdout.strip().startswith(str(tmp_path / "node"))


def test_a_home_without_the_package_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNEFLEET_HOME", str(tmp_path))
    assert main([str(tmp_path / "b.tar.gz")]) == 2
    assert "has no verify, templates" in capsys.readouterr().err
