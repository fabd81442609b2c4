"""The prolog's NVML reading runs in a forked child while the hook imports its checks (verify.scheduler.nvml
Reading, started by verify.scheduler.cli), and the hooks' launcher ends the process without the interpreter's
teardown (verify.isolated.end_now). The child is real (os.fork, the pipe, marshal); only pynvml, NVML's
binding, is the stand-in of tests/helpers/fake_pynvml.py."""
from __future__ import annotations

import ctypes
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.fake_node import desired_state
from tests.helpers.fake_pynvml import fake_pynvml
from verify import isolated
from verify.cli import main
from verify.facts import peer_access
from verify.scheduler import nvml

REPO = Path(__file__).resolve().parents[2]


def p2p_answers(fake, refused: dict):
    fake.nvmlDeviceGetP2PStatus = lambda first, second, caps: refused.get((first, second, caps), 0)
    return fake


def test_the_child_answers_what_read_raw_reads_in_this_process(monkeypatch):
    fake = p2p_answers(fake_pynvml(3), {(0, 2, 1): 5})
    fake.nvmlDeviceGetRemappedRows = lambda h: (0, 0, 0, 0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    here = nvml.read_raw(peer_access.P2P_CAPS)
    reading = nvml.Reading(peer_access.P2P_CAPS)
    try:
        answer = reading.answer()
    finally:
        reading.close()
    assert answer == here  # tuples, None and the P2P rows' integer keys cross the pipe unchanged
    assert answer[1][0]["p2p"][2] == {"read": 0, "write": 5} and answer[1][0]["remapped_rows"] == (0, 0, 0, 0)


def test_the_answer_is_handed_over_before_nvml_shuts_down(monkeypatch, tmp_path):
    """The child's nvmlShutdown waits until the parent has the answer; were the answer sent after it, the
    shutdown would wait out its 10 s and say so."""
    read, said = tmp_path / "answer-read", tmp_path / "shutdown-saw"
    fake = fake_pynvml(2)

    def shutdown():
        deadline = time.monotonic() + 10
        while not read.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        said.write_text("the answer was read" if read.exists() else "timed out")

    fake.nvmlShutdown = shutdown
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reading = nvml.Reading()
    driver, gpus = reading.answer()
    read.write_text("")
    reading.close()
    assert driver == "580.159.04" and len(gpus) == 2
    assert said.read_text() == "the answer was read"


def test_an_error_the_reading_does_not_foresee_is_raised_in_the_hook_never_a_verdict(monkeypatch):
    fake = fake_pynvml(2)
    fake.nvmlDeviceGetPciInfo = lambda h: {}["busId"]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reading = nvml.Reading()
    with pytest.raises(nvml.ReadingFailed, match="KeyError: 'busId'"):
        reading.answer()
    reading.close()


def test_a_child_that_dies_without_an_answer_leaves_the_gpus_to_nvidia_smi(monkeypatch):
    fake = fake_pynvml(2)
    fake.nvmlInit = lambda: os.kill(os.getpid(), signal.SIGKILL)  # as a crash in libnvidia-ml would end it
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reading = nvml.Reading()
    assert reading.answer() == (None, "the NVML reading process ended without an answer (signal 9)")
    reading.close()


def test_without_pynvml_the_child_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    reading = nvml.Reading()
    assert reading.answer() == (None, "pynvml is not installed")
    reading.close()


# The stand-in pynvml as a module file, for a fresh interpreter: nvmlInit records which process called it and
# whether the scheduler's checks were imported by then.
FAKE_MODULE = """import json, os, sys
from tests.helpers.fake_pynvml import fake_pynvml
globals().update(vars(fake_pynvml(2)))

def nvmlInit():
    with open(os.environ["TF_TEST_RECORD"], "w") as record:
        json.dump({"pid": os.getpid(), "checks_imported": "verify.scheduler.modes" in sys.modules}, record)
"""
HOOK = ("import json, os, sys; sys.path[0:0] = [sys.argv[1], sys.argv[2]]; import verify.cli; "
        "code = verify.cli.main(sys.argv[3:]); print(json.dumps({'pid': os.getpid(), 'code': code}))")


@pytest.mark.parametrize("mode, forked", [("prolog", True), ("epilog", True), ("health", False)])
def test_the_prolog_reads_nvml_in_a_child_started_before_its_checks_are_imported(tmp_path, mode, forked):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "pynvml.py").write_text(FAKE_MODULE)
    spec = tmp_path / "desired_state.json"
    spec.write_text(json.dumps(desired_state()))
    record, report = tmp_path / "record.json", tmp_path / "report.json"
    hook_argv = ["check", "--mode", mode, "--spec", str(spec), "--no-drain", "--state-dir=", "--textfile-dir=",
                 "--report", str(report)]
    done = subprocess.run([sys.executable, "-I", "-c", HOOK, str(REPO), str(tmp_path / "fake"), *hook_argv],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"], "TF_TEST_RECORD": str(record)})
    hook = json.loads(done.stdout.splitlines()[-1])
    init = json.loads(record.read_text())
    assert (init["pid"] != hook["pid"]) is forked
    if forked:
        assert init["checks_imported"] is False  # the child started before verify.scheduler.modes was imported
    run = json.loads(report.read_text())["run"]
    assert run["gpu_source"] == "nvml" and run["gpu_uuids"] == {}
    assert [g["bus_id"] for g in json.loads(report.read_text())["facts"]["gpus"]["gpus"]] == \
        ["00000000:18:00.0", "00000000:19:00.0"]


def test_a_prolog_that_cannot_fork_reads_nvml_itself(monkeypatch, tmp_path):
    def no_process(*_):
        raise BlockingIOError(11, "Resource temporarily unavailable")  # fork at a cgroup's pids.max

    monkeypatch.setattr(os, "fork", no_process)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    spec, report = tmp_path / "desired_state.json", tmp_path / "report.json"
    spec.write_text(json.dumps(desired_state()))
    code = main(["check", "--mode", "prolog", "--spec", str(spec), "--no-drain", "--state-dir=", "--textfile-dir=",
                 "--report", str(report)])
    assert code in (0, 1) and json.loads(report.read_text())["run"]["gpu_source"] == "nvml"


# ---- the NVSwitch fabric state ---------------------------------------------------------------------------

def test_the_fabric_state_is_read_into_the_struct_nvml_fills():
    """pynvml's nvmlDeviceGetGpuFabricInfo takes the struct to fill (nvml.h); asked with the handle alone it
    raised TypeError, which read every GPU as having no fabric and left the fabric check nothing to judge."""
    pynvml = pytest.importorskip("pynvml")
    assert list(inspect.signature(pynvml.nvmlDeviceGetGpuFabricInfo).parameters) == ["device", "gpuFabricInfo"]
    fake = fake_pynvml(1)
    fake.c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t

    def fabric_info(device, info):
        filled = ctypes.cast(info, ctypes.POINTER(pynvml.c_nvmlGpuFabricInfo_t)).contents
        filled.state, filled.status = 2, 0  # NVML_GPU_FABRIC_STATE_IN_PROGRESS
        return 0

    fake.nvmlDeviceGetGpuFabricInfo = fabric_info
    assert nvml.read_gpu(fake, 0)["fabric"] == (2, 0)
    def no_fabric(device, info):
        raise fake.NVMLError("Not Supported")  # a board without NVSwitches

    fake.nvmlDeviceGetGpuFabricInfo = no_fabric
    assert nvml.read_gpu(fake, 0)["fabric"] is None


# ---- the launcher's end ----------------------------------------------------------------------------------

def launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", "-c", isolated.HOOK_BOOTSTRAP, str(REPO), "", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_launcher_ends_with_the_hooks_status_and_everything_it_printed():
    version = launch("--version")
    assert (version.returncode, version.stdout) == (0, "tunefleet 0.1.0\n")
    refused = launch("check", "--mode", "health", "--spec", "/nonexistent/desired_state.json", "--state-dir=",
                     "--textfile-dir=")
    assert refused.returncode == 2 and "/nonexistent/desired_state.json" in refused.stdout + refused.stderr


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (3, 3), (70, 70), (256 + 2, 2), ("stopped", 1)])
def test_the_status_is_the_one_sys_exit_gives(code, status, capsys):
    assert isolated.exit_status(code) == status
    assert capsys.readouterr().err == ("stopped\n" if code == "stopped" else "")
