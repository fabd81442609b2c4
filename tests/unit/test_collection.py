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
        tops = {name.split("/")[0] for name in archive.getnames()}
    # Python, tests and scenarios stay out of the artifact.
    assert {"roles", "playbooks", "plugins", "templates", "meta"} <= tops
    assert not tops & {"verify", "tests", "molecule", ".venv", "reports", "benchmarks"}
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
