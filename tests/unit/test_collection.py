"""The repository builds into the installable collection tunefleet.gpu_node."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def installed_collection(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("collection")
    env = dict(os.environ, ANSIBLE_CONFIG="")
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(work), str(ROOT)],
        check=True, capture_output=True, cwd=work, env=env,
    )
    (tarball,) = work.glob("tunefleet-gpu_node-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    tops = {name.split("/")[0] for name in names}
    # verify/ ships: playbooks/verify.yml and roles/verify_node run it. Tests, scenarios and the
    # Python packaging files stay out of the artifact, and so do bytecode caches.
    assert {"roles", "playbooks", "plugins", "templates", "meta", "verify"} <= tops
    assert {"verify/fleet/bundle.py", "verify/noderun.py", "templates/desired_state.json.j2"} <= set(names)
    assert not tops & {"tests", "molecule", ".venv", "reports", "benchmarks", "setup.py", "pyproject.toml"}
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p", str(work / "installed"), str(tarball)],
        check=True, capture_output=True, cwd=work, env=env,
    )
    return work / "installed"


def test_roles_are_exposed_under_the_collection_name(installed_collection: Path) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG="", ANSIBLE_COLLECTIONS_PATH=str(installed_collection))
    listed = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "role", "-l", "tunefleet.gpu_node"],
        check=True, capture_output=True, text=True, cwd=installed_collection, env=env,
    ).stdout
    for role in ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu", "preflight"):
        assert f"tunefleet.gpu_node.{role}" in listed


def test_site_playbook_runs_by_collection_name(installed_collection: Path) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG="", ANSIBLE_COLLECTIONS_PATH=str(installed_collection))
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "tunefleet.gpu_node.site", "--syntax-check"],
        capture_output=True, text=True, cwd=installed_collection, env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "gpu_node/playbooks/site.yml" in done.stdout
