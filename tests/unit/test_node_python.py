"""Find the node's torch (issue 40 item 6), through the real probe on real venvs made here (python3 -m venv):
a venv whose site-packages holds a `torch` package vs one without; the order verify_node_python, then python3 on
root's login PATH, then /usr/bin/python3; each candidate trust-checked before it runs (planted as `nobody`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.other_user import give, needs_root
from verify.bench import torch_rows_unchecked
from verify.bench.gpu import run as gpu_run
from verify.fleet.node_python import SYSTEM_PYTHON, find, try_candidate
from verify.result import CheckResult, Status
from verify.runner import CommandOutput, run_command

pytestmark = needs_root
BASE_PYTHON = "/usr/bin/python3"


def make_venv(where: Path, with_torch: bool) -> Path:
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    if with_torch:
        site = next(where.glob("lib/python*/site-packages"))
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text("__version__ = 'a package directory made by the test'\n")
    return where / "bin" / "python3"


@pytest.fixture(scope="module")
def venvs(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("venvs")
    return {"torch": make_venv(base / "with-torch", True), "none": make_venv(base / "without-torch", False)}


def login_path_is(python: str):
    """The real runner, with root's login shell's answer to `command -v python3` replaced (as on the real host,
    where python3 on PATH is a venv's)."""
    def runner(argv, **kwargs):
        if argv[1:3] == ["-l", "-c"]:
            return CommandOutput(argv=list(argv), returncode=0, stdout=python + "\n", stderr="", duration_s=0.0)
        return run_command(argv, **kwargs)
    return runner


def test_a_venv_holding_torch_is_used_and_one_without_is_not(venvs):
    found = try_candidate(str(venvs["torch"]), [])
    assert found["outcome"] == "torch" and "a package directory made by the test" in found["detail"]
    missing = try_candidate(str(venvs["none"]), [])
    assert missing["outcome"] == "no torch" and "ModuleNotFoundError" in missing["detail"]


def test_python3_on_roots_login_path_comes_before_usr_bin_python3(venvs):
    """The real case: a 2x H200 host whose PATH python3 is a venv holding torch, /usr/bin/python3 without."""
    search = find("", [], runner=login_path_is(str(venvs["torch"])))
    assert search["used"] == str(venvs["torch"]) and search["fallback"] == str(venvs["torch"])
    assert [t["python"] for t in search["tried"]] == [str(venvs["torch"])]


def test_the_interpreter_ansible_runs_on_the_node_is_tried_after_the_login_path(venvs):
    # The 4x H200 node: root's login PATH has /usr/bin/python3 (no torch); python3 on PATH, the one Ansible ran
    # with (connection local), is a venv's interpreter holding torch.
    search = find("", [], runner=login_path_is(str(venvs["none"])), ansibles=str(venvs["torch"]), path="")
    assert search["used"] == str(venvs["torch"])
    assert [t["python"] for t in search["tried"]] == [str(venvs["none"]), str(venvs["torch"])]


def test_none_imports_torch_names_every_interpreter_tried(venvs, tmp_path):
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidia1").touch()
    search = find("", [], runner=login_path_is(str(venvs["none"])), dev=str(tmp_path), ansibles=str(venvs["none"]),
                  path="")
    assert search["used"] is None and search["gpus"] == 2
    assert [t["python"] for t in search["tried"]] == [str(venvs["none"]), SYSTEM_PYTHON]
    assert search["fallback"] == str(venvs["none"])  # the stdlib-only checks still run
    # The GPU rows are "could not be checked" (ERROR, exit 3), naming both, not SKIP "not installed"
    skipped = [CheckResult("bench.gpu", "bench", Status.SKIP,
                           reason="PyTorch is not installed (the GPU engines need it)"),
               CheckResult("bench.storage", "bench", Status.PASS, reason="fine")]
    rows = torch_rows_unchecked(skipped, search)
    assert rows[0].status == Status.ERROR and rows[1].status == Status.PASS
    assert str(venvs["none"]) in rows[0].reason and SYSTEM_PYTHON in rows[0].reason
    assert torch_rows_unchecked(skipped, dict(search, gpus=0))[0].status == Status.SKIP  # no GPU: not applicable


def test_the_real_gpu_row_without_torch_becomes_could_not_be_checked(monkeypatch):
    import verify.bench.gpu as gpu

    monkeypatch.setattr(gpu, "module_available", lambda name: False)  # this interpreter without torch
    tried = [{"python": "/usr/bin/python3", "outcome": "no torch",
              "detail": "ModuleNotFoundError: No module named 'torch'"}]
    rows = torch_rows_unchecked(gpu_run(None, None, None), {"used": None, "gpus": 4, "tried": tried})
    assert rows[0].status == Status.ERROR and "/usr/bin/python3" in rows[0].reason


def test_verify_node_python_when_set_is_the_only_candidate(venvs):
    search = find(str(venvs["none"]), [], runner=login_path_is(str(venvs["torch"])))
    assert search["used"] is None and [t["python"] for t in search["tried"]] == [str(venvs["none"])]


def test_a_venv_of_another_users_is_refused_before_it_runs(reachable):
    venv = reachable / "venv-of-nobody"
    python = make_venv(venv, True)
    site = next(venv.glob("lib/python*/site-packages"))
    mark = reachable / "pwned"
    (site / "sitecustomize.py").write_text(f"open({str(mark)!r}, 'w').write('ran as root')\n")
    for path in [venv, *venv.rglob("*")]:
        give(path)
    found = try_candidate(str(python), [])
    assert found["outcome"] == "refused" and "uid 65534" in found["detail"]
    assert not mark.exists()


def test_a_root_venv_whose_site_packages_others_can_write_is_refused(reachable):
    venv = reachable / "venv"
    python = make_venv(venv, True)
    site = next(venv.glob("lib/python*/site-packages"))
    site.chmod(0o777)
    found = try_candidate(str(python), [])
    assert found["outcome"] == "refused" and "writable by everyone" in found["detail"]


def test_a_link_of_another_users_to_a_good_interpreter_is_refused(reachable):
    link = reachable / "python3"
    link.symlink_to(BASE_PYTHON)
    give(link)
    found = try_candidate(str(link), [])
    assert found["outcome"] == "refused" and "uid 65534" in found["detail"]


def test_the_finder_runs_isolated_from_the_command_line(venvs, tmp_path):
    out = tmp_path / "python.json"
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "import verify.isolated; verify.isolated.main()",
                           str(Path(__file__).resolve().parents[2]), "", "verify.fleet.node_python",
                           f"--wanted={venvs['torch']}", f"--out={out}"],
                          capture_output=True, text=True, timeout=300, cwd="/", check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["used"] == str(venvs["torch"])
    assert oct(os.stat(out).st_mode & 0o777) == "0o600"


def test_the_node_run_carries_the_search_into_the_desired_state(tmp_path):
    from verify.noderun import spec_with_python

    spec = tmp_path / "desired_state.json"
    spec.write_text(json.dumps({"verify": {"benchmarks": ["quick"]}}))
    search = tmp_path / "python.json"
    search.write_text(json.dumps({"used": None, "fallback": "/usr/bin/python3", "gpus": 2, "tried": []}))
    search.chmod(0o600)
    carried = json.loads(Path(spec_with_python(str(spec), str(search))).read_text())
    assert carried["verify"]["benchmarks"] == ["quick"]
    assert carried["verify"]["python"]["gpus"] == 2 and carried["verify"]["python"]["running"] == sys.executable


def test_a_tree_walked_once_covers_what_is_inside_it_but_not_what_its_walk_left_out(tmp_path):
    from verify.fleet.node_python import Walked

    lib = tmp_path / "lib" / "python3.12"
    (lib / "site-packages" / "pkg").mkdir(parents=True)
    (lib / "encodings").mkdir()
    walked = Walked()
    walked.check(str(lib), skip=("site-packages",))
    assert walked._covered(str(lib / "encodings")) and walked._covered(str(lib))
    assert not walked._covered(str(lib / "site-packages")) and not walked._covered(str(lib / "site-packages/pkg"))
    walked.check(str(lib / "site-packages"))
    assert walked._covered(str(lib / "site-packages" / "pkg"))
