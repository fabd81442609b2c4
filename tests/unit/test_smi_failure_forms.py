"""nvidia-smi's own failure forms (issue 46 items 4 and 7): the default table with a missing GPU or ERR! fields,
"Unable to determine the device handle", the driver that does not answer, "No devices were found", every exit
code of nvidia-smi(1), and a present output that cannot be read. Each is a verdict with an action class (a lost
GPU is FAIL reboot, never "not installed"), an unreadable output is ERROR "could not read", never PASS or SKIP.
Real published outputs where found (tests/fixtures/node/health/public/README.md), built ones labelled there."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_gpu, run_checks
from verify.facts import health_smi, smi_failure, smi_table
from verify.judging import verdicts
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
BANNER = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  Release Build\n"
H200_Q = (HEALTH / "h200x2" / "cmd" / "nvidia-smi-q.stdout").read_text()
H200_BUSES = ("0000:00:06.0", "0000:00:07.0")
IDLE_CSV = (HEALTH / "h200_query-gpu_idle_590.48.01.csv").read_text()
M40_TABLE = (PUBLIC / "nvidia-smi_healthy_nvidia-docker759-m40x2-390.48.txt").read_text()
M40_BUSES = ("0000:02:00.0", "0000:82:00.0")
V100_ERR = (PUBLIC / "nvidia-smi_faulty_azhpc-diagnostics77-v100-power-err.txt").read_text()
HANDLE = (PUBLIC / "nvidia-smi_faulty_ogkm387-device-handle-unknown-error-520.61.05.txt").read_text()
HANDLE_A = (PUBLIC / "nvidia-smi-a-i0_faulty_nvidia-docker1553-device-handle.txt").read_text()
UNREACHABLE = (PUBLIC / "nvidia-smi_faulty_pastebin-Bc7vp497-driver-unreachable.txt").read_text()
NO_DEVICES = (PUBLIC / "nvidia-smi_faulty_ogkm862-no-devices-rm-init-failed.txt").read_text()
NOT_PASSED = (Status.FAIL, Status.ERROR)


def tree(tmp_path, buses=(), driver=True) -> FakeTree:
    fake = FakeTree(tmp_path)
    if driver:
        fake.write("/proc/driver/nvidia/version", BANNER)
    for address in buses:
        fake.write(f"/sys/bus/pci/devices/{address}/vendor", "0x10de\n")
        fake.write(f"/sys/bus/pci/devices/{address}/class", "0x030200\n")
    return fake


def answering(csv=None, q=None, table=None) -> ReplayRunner:
    """The health query's three commands, each (returncode, stdout, stderr) or None: not installed."""
    answers = {}
    for argv, answer in ((health_smi.argv(), csv), (health_smi.Q_ARGV, q), (health_smi.TABLE_ARGV, table)):
        if answer is not None:
            answers[tuple(argv)] = CommandOutput(list(argv), *answer, 0.1)
    return ReplayRunner(answers)


def presence(tmp_path, runner, buses=(), spec=None):
    node = tree(tmp_path, buses).node(runner=runner, live=True)
    return health_gpu.run_presence(spec or desired_state(), node)[0], node


# ---- the forms, each on a real published output ------------------------------------------------------------

@pytest.mark.parametrize("text, returncode, bus", [
    (HANDLE, 15, "0000:0b:00.0"),  # open-gpu-kernel-modules#387: fixed by reseating the GPU
    (HANDLE_A, 15, "0000:09:00.0"),  # nvidia-docker#1553 `nvidia-smi -a -i 0`
])
def test_a_gpu_without_a_device_handle_is_lost_and_named_never_not_installed(tmp_path, text, returncode, bus):
    for where in ("csv", "q"):  # the live query, or a capture of -q alone
        runner = answering(**{where: (returncode, text, "")})
        result, node = presence(tmp_path / where, runner, buses=(bus,))
        assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT, result
        assert bus.upper() in result.reason.upper() and "cannot reach the GPU" in result.reason
        assert "not installed" not in result.reason
        memory = health_gpu.run_memory(desired_state(), node)[0]
        assert memory.status is Status.SKIP and "health.gpu.presence judges it" in memory.reason


def test_a_driver_that_does_not_answer_fails_where_the_bus_shows_gpus_and_skips_where_it_shows_none(tmp_path):
    runner = answering(csv=(9, "", UNREACHABLE))
    result, _ = presence(tmp_path / "gpus", runner, buses=M40_BUSES)
    assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT
    assert "does not answer" in result.reason and "couldn't communicate" in result.reason
    result, _ = presence(tmp_path / "none", answering(csv=(9, "", UNREACHABLE)))
    assert result.status is Status.SKIP


def test_no_devices_found_on_a_bus_with_gpus_is_every_gpu_lost(tmp_path):
    # open-gpu-kernel-modules#862: the GPU at 0000:01:00.0 on the bus, RmInitAdapter failed, nvidia-smi finds none
    runner = answering(csv=(6, NO_DEVICES, ""))
    result, _ = presence(tmp_path / "gpus", runner, buses=("0000:01:00.0",))
    assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT
    assert "initialised none" in result.reason and "not installed" not in result.reason
    bare, _ = presence(tmp_path / "bare", answering(csv=(6, NO_DEVICES, "")))
    assert bare.status is Status.SKIP  # no GPU on the bus and none expected: nothing is lost


def test_the_default_table_of_a_healthy_node_passes_and_a_missing_gpu_fails(tmp_path):
    # a capture of the default table where the CSV was expected (--inject, or a paste): read by its form
    result, node = presence(tmp_path / "ok", answering(csv=(0, M40_TABLE, "")), buses=M40_BUSES)
    assert result.status is Status.PASS and result.observed == 2
    assert [g.bus_id for g in health_smi.reading(node).gpus] == ["00000000:02:00.0", "00000000:82:00.0"]
    result, _ = presence(tmp_path / "lost", answering(csv=(0, M40_TABLE, "")), buses=M40_BUSES + ("0000:83:00.0",))
    assert result.status is Status.FAIL and "0000:83:00.0" in result.reason and result.details["action"] == "reboot"


def test_one_err_reading_is_watched_and_a_gpu_that_answers_none_is_lost(tmp_path):
    result, _ = presence(tmp_path / "one", answering(csv=(0, V100_ERR, "")), buses=("8ed0:00:00.0",))
    assert result.status is Status.WARN and result.details["action"] == verdicts.WATCH
    assert "power.draw 'err!'" in result.reason
    # the same box with every reading ERR! (built from the real box: the driver reading nothing of the GPU)
    dead = re.sub(r"29C|P0|593MiB", "ERR!", V100_ERR)
    result, _ = presence(tmp_path / "all", answering(csv=(0, dead, "")), buses=("8ed0:00:00.0",))
    assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT
    assert "answers no reading" in result.reason


@pytest.mark.parametrize("value, action", [("[GPU is lost]", verdicts.REBOOT),
                                           ("[GPU requires reset]", verdicts.REBOOT),
                                           ("[Unknown Error]", verdicts.WATCH)])
def test_csv_cells_the_driver_could_not_read_are_judged(tmp_path, value, action):
    header, row = IDLE_CSV.splitlines()[:2]
    cells = row.split(", ")
    names = [health_smi._header_name(c) for c in header.split(", ")]
    cells[names.index("power.draw")] = value
    if action == verdicts.REBOOT:
        cells[names.index("temperature.gpu")] = value
    result, _ = presence(tmp_path, answering(csv=(0, f"{header}\n{', '.join(cells)}\n", "")),
                         buses=("0000:83:00.0",))
    assert result.details.get("action") == action and result.status is verdicts.status_of(action)


# ---- unreadable is never healthy ---------------------------------------------------------------------------

def headerless(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("GPU "))


@pytest.mark.parametrize("damage, why", [
    (headerless, "no 'GPU <bus id>' line"),
    (lambda t: t.split("GPU 00000000:00:07.0")[0], "Attached GPUs : 2' but 1 GPU block"),
    (lambda t: t[: len(t) * 3 // 4], "cut short"),
])
def test_a_q_paste_that_cannot_be_read_is_error_not_no_gpu_not_installed(tmp_path, damage, why):
    # --inject with the real H200 `nvidia-smi -q`, damaged as pastes are: the CSV query is not captured
    for buses in ((), H200_BUSES):
        node = tree(tmp_path / str(len(buses)), buses).node(runner=answering(q=(0, damage(H200_Q), "")), live=True)
        results = run_checks(desired_state(), node, names=["health.gpu.presence", "health.gpu.memory",
                                                           "health.gpu.clocks"])
        presence_result = results[0]
        assert presence_result.status is Status.ERROR, presence_result
        assert presence_result.reason.startswith("could not read nvidia-smi -q") and why in presence_result.reason
        assert "not installed" not in presence_result.reason
        assert not any("not installed" in r.reason for r in results)


def test_the_whole_report_reads_and_its_gpus_pass(tmp_path):
    node = tree(tmp_path, H200_BUSES).node(runner=answering(q=(0, H200_Q, "")), live=True)
    assert health_gpu.run_presence(desired_state(), node)[0].status is Status.PASS


@pytest.mark.parametrize("returncode, text", [
    (2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"),
    (0, "NVIDIA System Management Interface -- v590.48.01\n\nUsage: nvidia-smi [OPTION1 [ARG1]] ...\n"),
    (4, "Insufficient Permissions\n"),
    # the real answer of nvidia-smi 580.159.04 on the 1x H100 to an unknown flag (exit 255), 2026-12-07
    (255, (PUBLIC / "nvidia-smi-bad-flag_healthy_h100x1-580.159.04.txt").read_text()),
])
def test_a_tool_that_printed_its_usage_or_was_refused_is_could_not_check(tmp_path, returncode, text):
    result, _ = presence(tmp_path, answering(csv=(returncode, text, "")), buses=M40_BUSES)
    assert result.status is Status.ERROR, result
    assert "could not" in result.reason


@given(st.sampled_from(sorted(smi_failure.EXIT_CODES)), st.booleans())
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_every_documented_exit_code_is_a_verdict_never_a_pass(tmp_path_factory, returncode, gpus_on_bus):
    meaning, action = smi_failure.EXIT_CODES[returncode]
    buses = M40_BUSES if gpus_on_bus else ()
    result, _ = presence(tmp_path_factory.mktemp("rc"), answering(csv=(returncode, "", "")), buses=buses)
    if action is None:
        assert result.status is Status.ERROR and meaning in result.reason
    elif gpus_on_bus or returncode not in (6, 9):
        assert result.status is verdicts.status_of(action) and result.details["action"] == action
        assert meaning in result.reason
    else:
        assert result.status is Status.SKIP  # "no driver" / "no device" with no GPU on the bus


# ---- the table as a class: any subset of rows missing, ERR! in any field ---------------------------------

def broken_table(drop: list, errors: list) -> str:
    """The real M40 table with GPU boxes dropped and readings replaced by ERR! (errors: per GPU, which of its
    temperature, performance state, power draw and memory cells)."""
    lines, out, index, skip_next = M40_TABLE.splitlines(keepends=True), [], -1, 0
    for line in lines:
        if skip_next:
            skip_next -= 1
            continue
        if re.match(r"^\|\s+\d+\s+Tesla", line):
            index += 1
            if index in drop:
                skip_next = 2  # its readings line and the rule under it
                continue
        elif index >= 0 and re.match(r"^\| N/A", line):
            cells = re.findall(r"\d+C|P\d|\d+W(?= /)|\d+MiB(?= /)", line)
            for cell in errors[index]:
                line = line.replace(cells[cell], "ERR!".rjust(len(cells[cell])), 1)
        out.append(line)
    return "".join(out)


@given(st.sets(st.sampled_from([0, 1]), max_size=2),
       st.lists(st.sets(st.integers(0, 3), max_size=4), min_size=2, max_size=2))
@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_any_broken_table_is_judged_by_its_worst_gpu(tmp_path_factory, drop, errors):
    text = broken_table(sorted(drop), errors)
    result, _ = presence(tmp_path_factory.mktemp("t"), answering(csv=(0, text, "")), buses=M40_BUSES)
    shown = [i for i in (0, 1) if i not in drop]
    if not shown:  # a table with no GPU row is a cut paste (nvidia-smi itself prints "No devices were found")
        assert result.status is Status.ERROR and "no GPU row" in result.reason
    elif drop or any(len(errors[i]) == 4 for i in shown):
        assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT
    elif any(errors[i] for i in shown):
        assert result.status is Status.WARN and result.details["action"] == verdicts.WATCH
    else:
        assert result.status is Status.PASS
    if result.status in (Status.FAIL, Status.WARN):
        assert verdicts.action_of(result.details) in verdicts.ACTIONS


@given(st.text(max_size=300))
@settings(max_examples=150, deadline=None)
def test_the_readers_are_total_and_never_invent_a_healthy_gpu(text):
    gpus, unreadable = health_smi.read_any(text, "nvidia-smi")
    assert isinstance(unreadable, str)
    smi_table.parse(text)
    smi_failure.classify(text, text, 15)
    for gpu in gpus:  # whatever was read names a bus id
        assert re.match(r"[0-9A-Fa-f]{4,8}:", gpu.bus_id)


def test_every_failure_form_has_a_class_or_says_it_could_not_check():
    for form in smi_failure.FORMS:
        assert form.action is None or form.action in verdicts.ACTIONS
    for meaning, action in smi_failure.EXIT_CODES.values():
        assert meaning and (action is None or action in verdicts.ACTIONS)


CSV_HEADER, CSV_ROW = IDLE_CSV.splitlines()[:2]
CSV_NAMES = [health_smi._header_name(c) for c in CSV_HEADER.split(", ")]
ERRORS = st.sampled_from(["[Unknown Error]", "[GPU is lost]", "[GPU requires reset]", "ERR!"])


@given(st.dictionaries(st.sampled_from([n for n in CSV_NAMES if n not in health_smi.REQUIRED]), ERRORS, max_size=12))
@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_any_csv_cells_the_driver_could_not_read_are_never_a_pass(tmp_path_factory, broken):
    """The H200's real row with any set of its cells printed as errors: PASS only when none is."""
    cells = CSV_ROW.split(", ")
    for name, value in broken.items():
        cells[CSV_NAMES.index(name)] = value
    result, node = presence(tmp_path_factory.mktemp("csv"), answering(csv=(0, f"{CSV_HEADER}\n{', '.join(cells)}\n",
                                                                          "")), buses=("0000:83:00.0",))
    assert len(health_smi.reading(node).gpus) == 1
    gone = {"[GPU is lost]", "[GPU requires reset]"} & set(broken.values())
    still_read = {"temperature.gpu", "power.draw", "ecc.mode.current"} - set(broken)  # every GPU gives these
    if not broken:
        assert result.status is Status.PASS
    elif gone or not still_read:
        assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT
    else:
        assert result.status is Status.WARN and result.details["action"] == verdicts.WATCH


def test_the_h100_s_own_default_table_reads_as_one_healthy_gpu():
    # The R580 table of the 1x H100 (tests/device/smi_forms.sh, 2026-12-07): the healthy twin of the table faults.
    from verify.facts import smi_table

    text = (PUBLIC / "nvidia-smi-table_healthy_h100x1-580.159.04.txt").read_text()
    assert smi_table.looks_like_table(text)
    table = smi_table.parse(text)
    assert [g.bus_id for g in table.gpus] == ["00000000:00:06.0"]
    assert not smi_failure.classify(text, "", 0)
