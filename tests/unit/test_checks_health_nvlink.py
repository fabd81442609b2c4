"""NVLink judged per GPU against its own model (issue 26 item 4), on real `nvidia-smi nvlink -s` outputs:
published ones of faulty and healthy nodes (tests/fixtures/node/health/public/README.md cites each) and the
2x H200 machine's own capture, through the real Node with a replayed runner."""
from __future__ import annotations

from pathlib import Path

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_nvlink
from verify.checks.health_common import COUNTERS_AT, PREVIOUS_COUNTERS_AT
from verify.facts import dcgmi_nvlink, links
from verify.judging import verdicts
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
H200_S = (HEALTH / "h200x2" / "cmd" / "nvlink-s.stdout").read_text()
H200_E = (HEALTH / "h200x2" / "cmd" / "nvlink-e.stdout").read_text()
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"


def public(name: str) -> str:
    return (PUBLIC / name).read_text()


def spec_with(profile=None, **thresholds) -> dict:
    spec = desired_state()
    spec["verify"] = {"profile": profile, "benchmarks": [], "thresholds": thresholds}
    return spec


def node_answering(tmp_path, status: str, errors: str = "", memo=None):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    runner = ReplayRunner({tuple(health_nvlink.STATUS_ARGV): CommandOutput([], 0, status, "", 0.1),
                           tuple(health_nvlink.ERRORS_ARGV): CommandOutput([], 0, errors, "", 0.1)})
    node = tree.node(runner=runner, live=True)
    node.memo.update(memo or {})
    return node


def by_gpu(results) -> dict:
    return {r.check_id: r for r in results}


def test_a_v100_with_two_inactive_links_fails_naming_the_gpu_and_links_though_no_other_gpu_is_shown(tmp_path):
    # The poster showed GPU 3 only: no other GPU can set the bar; the GPU's own six listed links do.
    results = health_nvlink.run(spec_with(), node_answering(tmp_path, public(
        "nvlink-s_faulty_azhpc-diagnostics73-v100-2inactive.txt")))
    gpu3 = by_gpu(results)["health.nvlink.3"]
    assert gpu3.status is Status.FAIL
    assert "GPU 3 (Tesla V100-SXM2-32GB)" in gpu3.reason and "4 of 6 links up (inactive: 3, 5)" in gpu3.reason
    assert gpu3.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert gpu3.remediation == verdicts.WORDS[verdicts.REBOOT]


def test_an_a100_with_all_links_inactive_fails_against_its_models_12_links(tmp_path):
    results = health_nvlink.run(spec_with(), node_answering(tmp_path, public(
        "nvlink-s_faulty_azurehpc-hc-a100-all-inactive.txt")))
    gpu6 = by_gpu(results)["health.nvlink.6"]
    assert gpu6.status is Status.FAIL and "0 of 12 links up (all links inactive)" in gpu6.reason
    assert "a100-sxm4-80gb" in gpu6.details["thresholds"]["links"]["source"]
    assert gpu6.details[verdicts.ACTION_KEY] == verdicts.REBOOT


def test_healthy_a100_nodes_pass_with_the_models_count_and_rate(tmp_path):
    eight = health_nvlink.run(spec_with(), node_answering(tmp_path / "a", public("nvlink-s_healthy_gpud-a100x8.txt")))
    assert [(r.check_id, r.status) for r in eight] == [(f"health.nvlink.{n}", Status.PASS) for n in range(8)]
    assert eight[0].expected == ">= 12 links at >= 24.75 GB/s"
    one = health_nvlink.run(spec_with(), node_answering(tmp_path / "b",
                                                        public("nvlink-s_healthy_azurehpc-hc-a100.txt")))
    assert [(r.check_id, r.status, r.observed) for r in one] == [("health.nvlink.7", Status.PASS, "12 links up")]


def test_gb200_is_held_to_18_links_at_its_rate_not_to_what_the_output_shows(tmp_path):
    results = by_gpu(health_nvlink.run(spec_with(), node_answering(
        tmp_path, public("nvlink-s_healthy_k8s-test-infra371-gb200.txt"))))
    assert results["health.nvlink.0"].status is Status.PASS
    assert results["health.nvlink.0"].expected == ">= 18 links at >= 52.594 GB/s"
    # The poster cut GPU 1's block after 2 links: as far as this text says, 16 of its model's 18 are missing.
    assert results["health.nvlink.1"].status is Status.FAIL and "2 of 18 links up" in results["health.nvlink.1"].reason


def test_one_h200_link_down_fails_that_gpu_without_a_profile_and_the_other_passes(tmp_path):
    one = H200_S.replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    results = health_nvlink.run(spec_with(), node_answering(tmp_path, one, H200_E))
    assert [r.status for r in results] == [Status.FAIL, Status.PASS]
    assert "GPU 0 (NVIDIA H200): 17 of 18 links up (inactive: 5)" in results[0].reason


def test_a_link_below_the_models_rate_fails_even_when_every_link_of_the_node_is_slow(tmp_path):
    # Both GPUs trained every link at half rate: the fastest link seen is no bar; the model's rate is.
    halved = H200_S.replace("26.562 GB/s", "13.281 GB/s")
    results = health_nvlink.run(spec_with(), node_answering(tmp_path, halved, H200_E))
    assert all(r.status is Status.FAIL and "links below 26.296 GB/s" in r.reason for r in results)


def test_the_profile_overrides_the_models_figures(tmp_path):
    results = health_nvlink.run(spec_with("h200-x2-nvlink"), node_answering(tmp_path, H200_S, H200_E))
    assert [r.status for r in results] == [Status.PASS, Status.PASS]
    assert results[0].expected == ">= 18 links at >= 26.5 GB/s"
    assert results[0].details["thresholds"]["links"]["source"].startswith("nvidia-smi nvlink --status on the machine")


def test_a_pcie_card_with_optional_nvlink_and_no_bridge_passes(tmp_path):
    # The real all-inactive A100 block, its name changed to the PCIe part (whose NVLink needs a bridge).
    no_bridge = public("nvlink-s_faulty_azurehpc-hc-a100-all-inactive.txt").replace(
        "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")
    result = health_nvlink.run(spec_with(), node_answering(tmp_path, no_bridge))[0]
    assert result.status is Status.PASS and "no NVLink bridge" in result.reason


def test_counters_are_judged_as_the_increase_since_the_last_run_where_it_is_known(tmp_path):
    errors = H200_E.replace("Link 4: CRC Errors: 0", "Link 4: CRC Errors: 250", 1)
    since_load = health_nvlink.run(spec_with(), node_answering(tmp_path / "a", H200_S, errors))[0]
    assert since_load.status is Status.FAIL and "link 4 CRC Errors 250" in since_load.reason
    previous = {"health.nvlink.0": {"4": {"CRC Errors": 247}}}
    delta = health_nvlink.run(spec_with(), node_answering(tmp_path / "b", H200_S, errors,
                                                          {health_nvlink.PREVIOUS_COUNTERS: previous}))[0]
    assert delta.status is Status.WARN
    assert "link 4 CRC Errors 3 since the last run (250 since driver load)" in delta.reason
    assert delta.details[verdicts.ACTION_KEY] == verdicts.RESET_GPU and "nvidia-smi -r -i 0" in delta.remediation
    same = {"health.nvlink.0": {"4": {"CRC Errors": 250}}}
    quiet = health_nvlink.run(spec_with(), node_answering(tmp_path / "c", H200_S, errors,
                                                          {health_nvlink.PREVIOUS_COUNTERS: same}))[0]
    assert quiet.status is Status.PASS and quiet.details["errors_since_last_run"]["4"]["CRC Errors"] == 0


def test_gpu_names_and_all_inactive_blocks_parse_from_the_real_outputs():
    assert links.parse_nvlink_gpu_names(H200_S) == {0: "NVIDIA H200", 1: "NVIDIA H200"}
    assert links.parse_nvlink_gpu_names(public("nvlink-s_faulty_azhpc-diagnostics73-v100-2inactive.txt")) == {
        3: "Tesla V100-SXM2-32GB"}
    assert links.parse_nvlink_all_inactive(public("nvlink-s_faulty_azurehpc-hc-a100-all-inactive.txt")) == {6}
    assert links.parse_nvlink_all_inactive(H200_S) == set()


def test_with_the_time_of_the_last_reading_the_increase_is_judged_per_minute_against_the_set_thresholds(tmp_path):
    # Link 4 CRC 247 -> 250 read two minutes apart: 1.5 a minute. Under DCGM's default (100 a second) a WARN;
    # with verify_thresholds' nvlink_crc_errors_per_min at 1 a FAIL. Link 5 replay 0 -> 0: no finding.
    errors = H200_E.replace("Link 4: CRC Errors: 0", "Link 4: CRC Errors: 250", 1)
    previous = {"health.nvlink.0": {"4": {"CRC Errors": 247}, "5": {"Replay Errors": 0}}}
    memo = {health_nvlink.PREVIOUS_COUNTERS: previous, PREVIOUS_COUNTERS_AT: 1_000_000.0, COUNTERS_AT: 1_000_120.0}
    default = health_nvlink.run(spec_with(), node_answering(tmp_path / "a", H200_S, errors, memo))[0]
    assert default.status is Status.WARN and default.details[verdicts.ACTION_KEY] == verdicts.RESET_GPU
    assert "link 4 CRC Errors 3 in 2.0 min = 1.5/min (250 since driver load)" in default.reason
    assert "link 5" not in default.reason and default.details["errors_per_min"]["5"]["Replay Errors"] == 0
    assert default.details["thresholds"]["crc_errors_per_min"]["source"].startswith("derived: DCGM")
    strict = health_nvlink.run(spec_with(nvlink_crc_errors_per_min=1),
                               node_answering(tmp_path / "b", H200_S, errors, memo))[0]
    assert strict.status is Status.FAIL and strict.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert strict.details["thresholds"]["crc_errors_per_min"]["source"] == "verify_thresholds (override)"
    # A clock that went backwards gives no interval: the increase is judged as a count, as without a time.
    backwards = dict(memo, **{COUNTERS_AT: 999_000.0})
    count = health_nvlink.run(spec_with(), node_answering(tmp_path / "c", H200_S, errors, backwards))[0]
    assert "link 4 CRC Errors 3 since the last run (250 since driver load)" in count.reason


# ---- the counters judged on their own (issue 36 item 2) ---------------------------------------------------

def node_without_status(tmp_path, errors: str, memo=None):
    """`nvlink -s` refused (as a capture holding `nvlink -e` alone replays), `nvlink -e` answering."""
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    refused = CommandOutput([], 3, "", "Failed to query NVLink status\n", 0.1)
    runner = ReplayRunner({tuple(health_nvlink.STATUS_ARGV): refused,
                           tuple(health_nvlink.ERRORS_ARGV): CommandOutput([], 0, errors, "", 0.1)})
    node = tree.node(runner=runner, live=True)
    node.memo.update(memo or {})
    return node


def test_clean_counters_without_the_status_half_pass_instead_of_skipping(tmp_path):
    results = health_nvlink.run(spec_with(), node_without_status(tmp_path, H200_E))  # the machine's own capture
    assert [r.status for r in results] == [Status.PASS, Status.PASS]
    assert "link status not read (nvidia-smi nvlink -s: Failed to query NVLink status)" in results[0].reason
    assert results[0].details["errors"]["0"]["Replay Errors"] == 0


def test_counters_alone_are_judged_as_rates_naming_the_gpu_by_bus_and_the_link(tmp_path):
    from verify.facts.gpu_query import Gpu, GpuInventory

    # the H200's real `nvlink -e`, one of its counts raised (no public capture of faulty counters was found)
    faulty = H200_E.replace("Link 3: Replay Errors: 0", "Link 3: Replay Errors: 4", 1)
    inventory = GpuInventory("nvml", [Gpu(0, "00000000:83:00.0", "NVIDIA H200", True)])
    previous = {health_nvlink.PREVIOUS_COUNTERS: {"health.nvlink.0": {"3": {"Replay Errors": 0}}},
                PREVIOUS_COUNTERS_AT: 1_000_000.0, COUNTERS_AT: 1_000_600.0, "gpus": inventory}
    result = by_gpu(health_nvlink.run(spec_with(), node_without_status(tmp_path, faulty, previous)))[
        "health.nvlink.0"]
    assert result.status is Status.FAIL and result.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert result.reason.startswith("GPU 0 (00000000:83:00.0): errors: link 3 Replay Errors 4 in 10.0 min = 0.4/min")
    assert result.details["errors_since_last_run"] == {"3": {"Replay Errors": 4}}


# ---- DCGM's view where nvidia-smi gives no link status (issue 36 item 8) ------------------------------------

def node_with_dcgmi(tmp_path, status: str, errors: dict = None):
    """nvidia-smi nvlink -s fails; dcgmi answers with `status` and, per GPU, `errors[gpu]` (else it fails)."""
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    answers = {tuple(health_nvlink.STATUS_ARGV): CommandOutput([], 255, "", "Failed to query NVLink status", 0.1),
               tuple(health_nvlink.DCGMI_STATUS_ARGV): CommandOutput([], 0, status, "", 0.1)}
    for gpu, text in (errors or {}).items():
        answers[tuple(health_nvlink.DCGMI_ERRORS_ARGV + [str(gpu)])] = CommandOutput([], 0, text, "", 0.1)
    return tree.node(runner=ReplayRunner(answers), live=True)


def test_dcgmi_link_status_all_down_fails_each_gpu_naming_the_links_and_the_source(tmp_path):
    results = by_gpu(health_nvlink.run(spec_with(), node_with_dcgmi(tmp_path, public(
        "dcgmi-nvlink-s_faulty_dcgm198-h100nvl-all-down-3.3.7.txt"))))
    assert sorted(results) == ["health.nvlink.0", "health.nvlink.1"]
    gpu0 = results["health.nvlink.0"]
    assert gpu0.status is Status.FAIL and gpu0.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert "0 of 18 links up (inactive: 0, 1, 2" in gpu0.reason
    assert gpu0.reason.endswith("(link states from dcgmi nvlink -s; link rate not read)")
    assert gpu0.details["links_gbps"] is None and gpu0.details["links_up"]["17"] is False


def test_dcgmi_link_status_all_up_passes_and_says_the_rate_was_not_read(tmp_path):
    results = health_nvlink.run(spec_with(), node_with_dcgmi(tmp_path, public(
        "dcgmi-nvlink-s_healthy_dcgm-exporter576-h100x8-570.124.06.txt")))
    assert [r.status for r in results] == [Status.PASS] * 8
    assert results[0].reason == "GPU 0: 18 links up (link states from dcgmi nvlink -s; link rate not read)"


def test_dcgmi_error_counts_are_read_and_judged_with_the_nvidia_smi_counters_rule(tmp_path):
    clean = public("dcgmi-nvlink-e_healthy_llm-action-h800-gpu1.txt")  # a real H800's box, every count 0
    counts = dcgmi_nvlink.parse_dcgmi_nvlink_errors(clean)
    assert counts.gpu == 1 and sorted(counts.links) == list(range(8))
    assert counts.links[7] == {"CRC FLIT Error": 0, "CRC Data Error": 0, "Replay Error": 0, "Recovery Error": 0}
    up = public("dcgmi-nvlink-s_healthy_llm-action-h800x8-8links.txt")
    gpu1 = by_gpu(health_nvlink.run(spec_with(), node_with_dcgmi(tmp_path / "a", up, {1: clean})))["health.nvlink.1"]
    assert gpu1.status is Status.PASS and gpu1.details["errors"]["0"]["Replay Error"] == 0
    # the same box with one count raised (no public capture of a faulty `dcgmi nvlink -e` was found)
    faulty = clean.replace("| -> Replay Error             | 0 ", "| -> Replay Error             | 3 ", 1)
    gpu1 = by_gpu(health_nvlink.run(spec_with(), node_with_dcgmi(tmp_path / "b", up, {1: faulty})))["health.nvlink.1"]
    assert gpu1.status is Status.WARN and gpu1.details[verdicts.ACTION_KEY] == verdicts.RESET_GPU
    assert "link 0 Replay Error 3 since driver load" in gpu1.reason


def test_dcgmi_slots_a_gpu_does_not_have_are_not_links(tmp_path):
    results = health_nvlink.run(spec_with(), node_with_dcgmi(tmp_path, public(
        "dcgmi-nvlink-s_healthy_llm-action-h800x8-8links.txt")))  # 8 of 18 slots: the rest "_"
    assert [r.status for r in results] == [Status.PASS] * 8 and results[0].observed == "8 links up"


def test_no_dcgmi_either_keeps_the_counters_alone_path(tmp_path):
    node = node_without_status(tmp_path, H200_E)  # dcgmi not installed: the earlier behaviour, unchanged
    results = health_nvlink.run(spec_with(), node)
    assert [r.status for r in results] == [Status.PASS, Status.PASS]
    assert ["dcgmi", "nvlink", "-s"] in node.runner.calls


def test_dcgmi_captures_answer_through_inject_like_the_other_tools(tmp_path):
    """`--inject DIR` with `dcgmi-nvlink-s.argv` / `.stdout` (the layout tests/device/capture_health.sh writes):
    the tree's node has no nvidia-smi, dcgmi's capture answers, the check judges DCGM's states."""
    from verify.inject import load, no_command

    directory = tmp_path / "inject"
    directory.mkdir(mode=0o700)
    (directory / "dcgmi-nvlink-s.argv").write_text("dcgmi nvlink -s\n")
    (directory / "dcgmi-nvlink-s.stdout").write_text(public("dcgmi-nvlink-s_faulty_dcgm198-h100nvl-all-down-3.3.7.txt"))
    runner = load(str(directory), real=no_command)
    node = FakeTree(tmp_path / "tree").write("/proc/driver/nvidia/version", BANNER).node(runner=runner, live=True)
    results = health_nvlink.run(spec_with(), node)
    assert [r.status for r in results] == [Status.FAIL, Status.FAIL]
    assert runner.answered == ["dcgmi-nvlink-s"]
