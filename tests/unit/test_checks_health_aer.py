"""PCIe AER (issue 46 item 3) through the real Node over a sysfs tree: the kernel's AER records of a real
published log attributed to the GPU behind the reporting root port (the PCI path verify.facts.pci_path reads),
the sysfs counters in the kernel's format (tests/fixtures/node/health/aer_sysfs/README.md, built), corrected
errors as a rate, and the healthy twins (a single real corrected record; the GPU machine's real log)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.drills import rebuild_sysfs
from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_aer
from verify.checks.health_common import remember_previous
from verify.facts import aer, kernel_log
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
SYSFS = HEALTH / "aer_sysfs"
FATAL_LOG = (PUBLIC / "kernel-log_faulty_returnn1500-aer-fatal-sdes-cmpltto-reltime.txt").read_text()
ONE_CORRECTED = (PUBLIC / "kernel-log_healthy_popos3363-aer-corrected-root-port-journal.txt").read_text()
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build\n"


def runner(log: str) -> ReplayRunner:
    return ReplayRunner({"dmesg": CommandOutput(["dmesg", "--kernel"], 0, log, "", 0.01),
                         "nvidia-smi": CommandOutput(["nvidia-smi"], 9, "", "no devices\n", 0.01)})


def gpu_behind_port(tmp_path, log: str, port: str = "0000:00:03.0", gpu: str = "0000:03:00.0",
                    files: dict = None, uptime_s: float = 6000.0):
    """A GPU behind a root port, as the kernel lays sysfs out; files: (device, name) -> text."""
    tree = FakeTree(tmp_path)
    tree.write("/proc/driver/nvidia/version", BANNER).write("/proc/uptime", f"{uptime_s:.2f} 1.00\n")
    real = {port: f"/sys/devices/pci0000:00/{port}", gpu: f"/sys/devices/pci0000:00/{port}/{gpu}"}
    tree.write(f"{real[port]}/vendor", "0x8086\n").write(f"{real[port]}/class", "0x060400\n")
    tree.write(f"{real[gpu]}/vendor", "0x10de\n").write(f"{real[gpu]}/class", "0x030200\n")
    for address, path in real.items():
        tree.link(f"/sys/bus/pci/devices/{address}", "../../.." + path[len("/sys"):])
    for (address, name), text in (files or {}).items():
        tree.write(f"{real[address]}/{name}", text)
    return tree.node(runner=runner(log), live=True)


def zero_counters(*addresses: str) -> dict:
    return {(a, f"aer_dev_{kind}"): (SYSFS / f"aer_dev_{kind}.zero").read_text()
            for a in addresses for kind in ("correctable", "fatal", "nonfatal")}


def judged(node) -> dict:
    return {r.check_id: r for r in health_aer.run(desired_state(), node)}


# ---- the real fatal log: the GPU behind the port that logged it -------------------------------------------------

def test_a_fatal_error_on_the_gpus_root_port_fails_the_gpu_with_the_vendor_words(tmp_path):
    result = judged(gpu_behind_port(tmp_path, FATAL_LOG))["health.aer.0000:03:00.0"]
    assert result.status is Status.FAIL and result.details["action"] == "reboot"
    for words in ("can't recover at 0000:03:00.0 (nvidia)", "device recovery failed at 0000:00:03.0",
                  "fatal error at 0000:00:03.0 (pcieport) [SDES, CmpltTO]"):
        assert words in result.reason, words
    assert "reseat" in result.remediation  # a surprise link down: the GPU was lost from the bus
    assert result.details["path"] == ["0000:00:03.0", "0000:03:00.0"]


def test_the_same_log_without_sysfs_still_names_the_gpu(tmp_path):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    (result,) = health_aer.run(desired_state(), tree.node(runner=runner(FATAL_LOG), live=True))
    assert (result.check_id, result.status) == ("health.aer.0000:03:00.0", Status.FAIL)
    assert "SDES" in result.reason and "0000:00:03.0" in result.details["path"]


def test_an_aer_record_of_another_device_is_not_the_gpus(tmp_path):
    other = FATAL_LOG.replace("0000:00:03.0", "0000:00:1c.0").replace("nvidia 0000:03:00.0", "nvme 0000:05:00.0")
    result = judged(gpu_behind_port(tmp_path, other, files=zero_counters("0000:00:03.0", "0000:03:00.0")))
    assert result["health.aer.0000:03:00.0"].status is Status.PASS


# ---- every wording the kernel prints (4.x id= form, the "AER: " prefix, 6.x "Uncorrectable (Non-Fatal)") -------

NONFATAL_LOG = (PUBLIC / "kernel-log_faulty_ms02ultra10-aer-nonfatal-acsviol-journal.txt").read_text()


def test_each_kernel_wording_reads_as_its_class():
    def read(name: str) -> list:
        records = kernel_log.kernel_records((PUBLIC / name).read_text())
        return [(e.device, e.severity, e.errors, e.recovery) for e in aer.distinct(aer.aer_events(records))]

    assert ("0000:80:1b.4", aer.NONFATAL, ["ACSViol"], "") in read(
        "kernel-log_faulty_ms02ultra10-aer-nonfatal-acsviol-journal.txt")
    assert read("kernel-log_healthy_endlessm625-aer-corrected-id-form.txt")[0] == (
        "0000:00:1c.5", aer.CORRECTED, ["Receiver Error"], "")
    assert ("0000:03:00.0", aer.CORRECTED, ["RxErr"], "") in read(
        "kernel-log_healthy_popos751-aer-corrected-aer-prefix-nvme.txt")  # pasted indented: the margin goes


def test_a_non_fatal_uncorrectable_error_on_the_gpus_port_fails(tmp_path):
    result = judged(gpu_behind_port(tmp_path, NONFATAL_LOG, port="0000:80:1b.4", gpu="0000:81:00.0"))[
        "health.aer.0000:81:00.0"]
    assert result.status is Status.FAIL and "nonfatal error at 0000:80:1b.4 (pcieport) [ACSViol]" in result.reason
    assert "device recovery failed at 0000:80:1b.4 (pcieport) x2" in result.reason
    elsewhere = judged(gpu_behind_port(tmp_path / "other", NONFATAL_LOG))["health.aer.0000:03:00.0"]
    assert elsewhere.status is Status.PASS  # the USB controller's port is not the GPU's path


def test_corrected_records_of_a_pasted_log_are_a_rate_not_a_fault(tmp_path):
    log = (PUBLIC / "kernel-log_healthy_popos751-aer-corrected-aer-prefix-nvme.txt").read_text()
    result = judged(gpu_behind_port(tmp_path, log, port="0000:00:1d.0", gpu="0000:01:00.0"))["health.aer.0000:01:00.0"]
    assert result.status is Status.PASS and result.details["corrected_per_min"] == 2.0


# ---- healthy twins ------------------------------------------------------------------------------------------------

def test_one_corrected_error_is_not_a_fault(tmp_path):
    node = gpu_behind_port(tmp_path, ONE_CORRECTED, port="0000:00:03.1", gpu="0000:2d:00.0")
    result = judged(node)["health.aer.0000:2d:00.0"]
    assert result.status is Status.PASS and result.details["corrected_per_min"] == 1.0


def test_the_gpu_machines_real_log_and_tree_pass(tmp_path):
    capture = HEALTH / "h200x2"
    tree = rebuild_sysfs(tmp_path, capture)
    log = (capture / "cmd" / "dmesg-kernel.stdout").read_text()
    results = health_aer.run(desired_state(), tree.node(runner=runner(log), live=True))
    assert [(r.check_id, r.status) for r in results] == [("health.aer.0000:00:06.0", Status.PASS),
                                                         ("health.aer.0000:00:07.0", Status.PASS)]


def test_a_node_without_gpus_or_nics_skips(tmp_path):
    tree = FakeTree(tmp_path).write("/proc/uptime", "10.0 1.0\n")
    (result,) = health_aer.run(desired_state(), tree.node(runner=runner(""), live=True))
    assert result.status is Status.SKIP


# ---- sysfs counters -----------------------------------------------------------------------------------------------

def test_a_fatal_count_on_the_port_fails_until_the_reboot(tmp_path):
    files = zero_counters("0000:00:03.0", "0000:03:00.0")
    files[("0000:00:03.0", "aer_dev_fatal")] = (SYSFS / "aer_dev_fatal.sdes-cmpltto").read_text()
    result = judged(gpu_behind_port(tmp_path, "", files=files))["health.aer.0000:03:00.0"]
    assert result.status is Status.FAIL and "0000:00:03.0: SDES 1 (fatal)" in result.reason
    assert "reseat" in result.remediation and result.details["counters"]["0000:00:03.0 fatal"] == 2
    clean = judged(gpu_behind_port(tmp_path / "clean", "", files=zero_counters("0000:00:03.0", "0000:03:00.0")))
    assert clean["health.aer.0000:03:00.0"].status is Status.PASS


def storm(count: int) -> str:
    text = (SYSFS / "aer_dev_correctable.zero").read_text()
    return text.replace("BadTLP 0", f"BadTLP {count // 2}").replace("BadDLLP 0", f"BadDLLP {count - count // 2}") \
        .replace("TOTAL_ERR_COR 0", f"TOTAL_ERR_COR {count}")


def test_corrected_errors_are_a_rate_since_the_last_run(tmp_path):
    files = zero_counters("0000:00:03.0", "0000:03:00.0")
    files[("0000:00:03.0", "aer_dev_correctable")] = storm(100)
    node = gpu_behind_port(tmp_path, "", files=files)
    # 90 corrected in the 2 minutes since the last run: 45 a minute, above DCGM's 8
    remember_previous(node, {"health.aer.0000:03:00.0": {"0000:00:03.0 corrected": 10}}, 1000.0, 1120.0)
    result = judged(node)["health.aer.0000:03:00.0"]
    assert result.status is Status.WARN and result.details["action"] == "watch"
    assert result.details["corrected_per_min"] == 45.0 and "since the last run" in result.reason
    # the same 100 since a boot 6000 s ago, with no earlier reading: 1 a minute
    quiet = judged(gpu_behind_port(tmp_path / "boot", "", files=files))["health.aer.0000:03:00.0"]
    assert quiet.status is Status.PASS and quiet.details["corrected_per_min"] == 1.0


# ---- the reader is total ----------------------------------------------------------------------------------------

PARTS = st.sampled_from(["pcieport 0000:00:03.0: ", "nvidia 0000:03:00.0: ", "AER: ", "PCIe Bus Error: ",
                         "severity=Uncorrected (Fatal), type=Transaction Layer, ", "   [ 5] SDES ", "[99] x",
                         "can't recover", "received: ", "id=00e5", "\n", " ", "9" * 3000, "(First)"])


@given(st.one_of(st.text(max_size=300), st.lists(PARTS, max_size=30).map("".join)))
def test_aer_events_and_counters_are_total(text):
    for event in aer.aer_events(kernel_log.kernel_records(text)):
        assert event.severity in (None, aer.FATAL, aer.NONFATAL, aer.CORRECTED)
    counts = aer.parse_counters(text)
    assert counts is None or all(0 <= v < 10 ** aer.MAX_COUNT_DIGITS for v in counts.values())
