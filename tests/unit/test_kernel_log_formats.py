"""The kernel-log reader reads every format util-linux, journald and syslog print (issue 36 item 4), an
incident is one failure however many lines it prints and recurs only after a reset (item 5), and the
reader is total on any input (issue 41 item 4). Each format is a real public capture
(tests/fixtures/node/health/public/README.md, "Round 3")."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_xid
from verify.facts import kernel_log, links
from verify.result import Status
from verify.runner import CommandOutput

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "public"
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build\n"


def read(name: str) -> str:
    return (PUBLIC / name).read_text()


def judge(tmp_path, log: str) -> dict:
    tree = FakeTree(tmp_path)
    tree.write("/proc/driver/nvidia/version", BANNER)
    runner = ReplayRunner({"dmesg": CommandOutput(["dmesg", "--kernel"], 0, log, "", 0.01),
                           "nvidia-smi": CommandOutput(["nvidia-smi"], 9, "", "no devices\n", 0.01)})
    return {r.check_id: r for r in health_xid.run(desired_state(), tree.node(runner=runner, live=True))}


# ---- formats --------------------------------------------------------------------------------------------

def test_the_caller_column_is_read_and_its_xid_judged(tmp_path):
    log = read("kernel-log_faulty_ogkm1030-xid31-caller-column-590.48.01.txt")
    (event,) = kernel_log.xid_events(log)
    assert (event.bus, event.code, event.record.uptime_s) == ("0000:2b:00.0", 31, 130.45625)
    result = judge(tmp_path, log)["health.gpu.xid.0000:2b:00.0"]
    assert result.status is Status.WARN and result.details["action"] == "application"
    assert result.remediation.startswith("pid 1942 (llama-bench)")
    # the same line with the kernel's own padding ("[%5lu.%06lu] [%6s]") reads the same
    padded = log.replace("[ 130.456250] [ T1946]", "[  130.456250] [  T1946]")
    assert [e.code for e in kernel_log.xid_events(padded)] == [31]


def test_a_journal_with_a_localised_month_keeps_the_driver_banner(tmp_path):
    log = read("kernel-log_healthy_cachyos1019-journal-localised-month-610.57.04.txt")
    records = kernel_log.driver_records(log)
    assert [r.message[:27] for r in records] == ["loading NVIDIA UNIX Open Ke"]
    assert kernel_log.resets(log) == [(0, None)]
    assert [r.status for r in judge(tmp_path, log).values()] == [Status.PASS]


def test_an_xid_written_from_userspace_is_never_the_drivers(tmp_path):
    log = read("kernel-log_healthy_gpud870-userspace-injected-xid79-decode.txt")
    assert kernel_log.xid_events(log) == []
    assert [r.status for r in judge(tmp_path, log).values()] == [Status.PASS]
    # the kernel's own facility is read, in the same layout
    kern = log.replace("syslog:err   :", "kern  :err   :")
    assert [(e.bus, e.code) for e in kernel_log.xid_events(kern)] == [("0000:04:00.0", 79)]


def test_short_monotonic_stamps_and_the_host_are_read():
    records = kernel_log.kernel_records(read("kernel-log_healthy_systemd34250-short-monotonic.txt"))
    assert [(r.uptime_s, r.message[:21]) for r in records] == [(7.636966, "Booting Linux on phys"),
                                                              (7.637276, "Linux version 6.9.5 (")]


def test_every_real_format_of_one_xid_line_gives_the_same_event():
    # each prefix as a real capture above or in the earlier fixtures prints it, before one real Xid line
    xid = "NVRM: Xid (PCI:0000:2b:00): 31, pid=1942, name=llama-bench, channel 0x00000002"
    prefixes = ["", "[  130.456250] ", "[  130.456250] [  T1946] ", "[Thu Apr  4 18:03:56 2024] ",
                "2024-11-15T12:02:03,470068+00:00 ", "kern  :warn  : 2025-01-21T02:21:33,498559+00:00 ",
                "<4>[  130.456250] ", "Nov 15 12:02:03 host kernel: ", "sep 03 13:25:15 cachyos kernel: ",
                "2024-11-15T12:02:03+0000 host kernel: ", "[ 1843.308145] host kernel: ", "kernel: ",
                "Nov  4 17:34:16 james-VPCF22M0E kernel: [ 3224.864246] ",
                "2024-11-15T12:02:03.123456789Z stdout F [  130.456250] "]
    for prefix in prefixes:
        assert [(e.bus, e.code) for e in kernel_log.xid_events(prefix + xid)] == [("0000:2b:00.0", 31)], prefix


# ---- incidents -------------------------------------------------------------------------------------------

XID119 = read("kernel-log_faulty_gpud-xid119-xe9680.txt").rstrip("\n") + "\n"  # 5 GSP timeouts in 6 min, no reset
IDENTITY = next(line for line in XID119.splitlines() if "NVRM: GPU at PCI:0000:9b:00" in line) + "\n"
TIMEOUTS = XID119.replace(IDENTITY, "")  # the GSP timeouts without the identity line the capture holds
LOAD = read("kernel-log_faulty_nvsentinel155-fallen-off-bus-probe-570.158.01.txt").splitlines()[-1] + "\n"


def test_one_failure_printed_many_times_is_one_incident(tmp_path):
    result = judge(tmp_path, XID119)["health.gpu.xid.0000:9b:00.0"]
    assert (result.status, result.details["action"], result.details["incidents"]) == (Status.WARN, "reset-gpu", 1)
    assert "recurs" not in result.reason and "0000:9b:00.0" in result.reason


def test_the_fault_after_a_driver_reload_is_a_recurrence(tmp_path):
    # two real captures joined by the real load banner (NVSentinel #155): the GSP timeouts came back
    assert judge(tmp_path, TIMEOUTS + TIMEOUTS)["health.gpu.xid.0000:9b:00.0"].details["incidents"] == 1
    result = judge(tmp_path, TIMEOUTS + LOAD + TIMEOUTS)["health.gpu.xid.0000:9b:00.0"]
    assert (result.status, result.details["action"], result.details["incidents"]) == (Status.FAIL, "drain-rma", 2)
    assert "recurs after reset (2 incidents)" in result.reason


def test_a_second_identity_line_is_a_gpu_reset_but_only_for_its_own_gpu(tmp_path):
    identity, timeouts = IDENTITY, TIMEOUTS
    assert judge(tmp_path, timeouts + timeouts)["health.gpu.xid.0000:9b:00.0"].details["incidents"] == 1
    assert judge(tmp_path, timeouts + identity + timeouts)["health.gpu.xid.0000:9b:00.0"].details["action"] == \
        "drain-rma"
    other = identity.replace("0000:9b:00", "0000:1b:00")
    assert judge(tmp_path, timeouts + other + timeouts)["health.gpu.xid.0000:9b:00.0"].details["incidents"] == 1


def test_xid_74_and_the_nvlink5_codes_name_their_link(tmp_path):
    result = judge(tmp_path, read("kernel-log_faulty_nvsentinel-xid74-link14.txt"))["health.gpu.xid.0003:00:00.0"]
    assert "NVLink 14" in result.reason and result.details["xids"]["74"]["links"] == [14]
    results = judge(tmp_path, read("kernel-log_faulty_gpud1174-xid145-149-nvlink5-kmsg.txt"))
    assert results["health.gpu.xid.0018:01:00.0"].details["xids"]["145"]["links"] == [13]
    assert "links" not in results["health.gpu.xid.0019:01:00.0"].details["xids"]["149"]  # "Link -1": none


# ---- total on any input (issue 41 item 4) ------------------------------------------------------------------

def test_an_absurd_xid_code_is_unreadable_not_a_crash(tmp_path):
    log = "[ 8213.402117] NVRM: Xid (PCI:0000:3b:00): " + "7" * 5000 + ", pid=1, name=x, garbage\n"
    (event,) = kernel_log.xid_events(log)
    assert event.code is None
    result = judge(tmp_path, log)["health.gpu.xid.0000:3b:00.0"]
    assert result.status is Status.WARN and "unreadable" in result.details["xids"]


LINE_PARTS = st.sampled_from(["[", "]", " ", "NVRM: ", "Xid (PCI:0000:3b:00): ", "9" * 5000, "kernel: ", "T1946",
                              "GPU at PCI:0000:3b:00: GPU-", "\n", "\t", ":", ".", "1e999", "\x00", "<4>",
                              "kern  :warn  : ", "sep 03 13:25:15 ", "loading NVIDIA UNIX"])


@given(st.one_of(st.text(max_size=400), st.lists(LINE_PARTS, max_size=40).map("".join)))
def test_xid_events_is_total(text):
    for event in kernel_log.xid_events(text):
        assert event.code is None or 0 <= event.code < 10 ** kernel_log.MAX_CODE_DIGITS
    kernel_log.resets(text)
    kernel_log.lost_events(text)


# ---- the scheduler hook reads the same evidence (item 7) ---------------------------------------------------

def test_the_hook_keeps_what_verify_judges_pcie_notices_included():
    from verify.scheduler import kernel_events

    notice = read("kernel-log_faulty_l2fwd-nv6-pcie-bw-limited-mlx5-x8.txt")
    log = notice + XID119
    since = kernel_events.from_text(log, "dmesg --kernel", None)
    assert links.parse_bandwidth_notices(since.text) == links.parse_bandwidth_notices(log) != {}
    assert [(e.bus, e.code) for e in kernel_log.xid_events(since.text)] == \
        [(e.bus, e.code) for e in kernel_log.xid_events(log)]
    assert kernel_log.resets(since.text) != []  # the identity line travels with the Xids: incidents count alike
    assert "Call Trace" not in since.text  # what no check judges stays out


def test_a_kmsg_record_with_absurd_numbers_is_no_record():
    from verify.scheduler import kernel_events

    good = b"6,339,5140900,-;NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off\n"
    assert kernel_events.parse_kmsg_record(good) == (0, 5.1409, good.decode().split(";", 1)[1].rstrip("\n"))
    for bad in (b"9" * 5000 + b",1,2,-;x", b"6,1," + b"9" * 5000 + b",-;x", "²,1,2,-;x".encode(), b"6,1;x", b""):
        assert kernel_events.parse_kmsg_record(bad) is None


@given(st.binary(max_size=300) | st.lists(st.sampled_from([b"6", b",", b";", b"9" * 5000, b"-", b"\n", b"\xff"]),
                                          max_size=20).map(b"".join))
def test_parse_kmsg_record_is_total(raw):
    from verify.scheduler import kernel_events

    parsed = kernel_events.parse_kmsg_record(raw)
    assert parsed is None or (0 <= parsed[0] < 128 and 0 <= parsed[1] < 1e15)


KMSG_PARTS = [b"0", b"4", b"6", b"12", b"339", b"5140900", b"5140901", b"9" * 30, b",", b";", b"-", b"\n", b"\xff",
              b"NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus."]


@given(st.binary(max_size=200) | st.lists(st.sampled_from(KMSG_PARTS), max_size=12).map(b"".join),
       st.none() | st.sampled_from([0.0, 5.1409, 5.140899, 5.140901, 1e30]))
def test_a_record_passed_over_unparsed_is_one_the_full_parse_would_drop(raw, after_s):
    """read_kmsg skips records from their header bytes (passed_over): never one the full parse would keep, a
    kernel-facility record newer than the cursor."""
    from verify.scheduler import kernel_events

    parsed = kernel_events.parse_kmsg_record(raw)
    kept = parsed is not None and parsed[0] == 0 and (after_s is None or parsed[1] > after_s)
    assert not (kept and kernel_events.passed_over(raw, after_s))


def test_passed_over_skips_old_records_and_other_facilities_and_keeps_new_kernel_records():
    from verify.scheduler import kernel_events

    xid = b"4,1234,8213402117,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    assert kernel_events.passed_over(xid, 8213.402117) and kernel_events.passed_over(xid, 9000.0)
    assert not kernel_events.passed_over(xid, 8213.4) and not kernel_events.passed_over(xid, None)
    assert kernel_events.passed_over(b"12,99,5,-;NVRM: Xid (PCI:0000:3b:00): 79, forged\n", None)  # user facility


@given(st.text(max_size=200) | st.sampled_from(["9" * 5000 + " Gb/sec", "1.2.3 Gb/sec", "0 Gb/sec", "nan Gb/sec"]))
def test_parse_rate_is_total(value):
    from verify.checks.health_ib import parse_rate

    rate = parse_rate(value)
    assert rate is None or 0 < rate < 10 ** 7


# ---- NVSwitch SXid lines (issue 36 item 8) -----------------------------------------------------------------

def test_fatal_sxids_name_the_switch_by_bus_and_the_links(tmp_path):
    log = read("kernel-log_faulty_gpud-sxid20034-xid79.txt")
    results = judge(tmp_path, log)
    switch0 = results["health.nvswitch.sxid.0000:05:00.0"]
    assert switch0.status is Status.FAIL and switch0.details["action"] == "reboot"
    assert "NVSwitch nvswitch0 (0000:05:00.0): SXid 20034 fatal on link(s) 62, 63" in switch0.reason
    assert switch0.details["lines"] == 4  # two fatal lines + their Severity / Data details: one switch's events
    assert results["health.nvswitch.sxid.0000:06:00.0"].details["sxids"]["20034"]["links"] == [48]
    assert results["health.gpu.xid.0000:91:00.0"].details["action"] == "reboot"  # the Xid 79 beside them
    # the scheduler hook keeps them (one filter)
    from verify.scheduler import kernel_events

    assert len(kernel_log.sxid_events(kernel_events.from_text(log, "dmesg", None).text)) == 8


def test_a_non_fatal_sxid_is_watched_and_a_log_without_any_has_no_switch_row(tmp_path):
    log = read("kernel-log_faulty_gpud-sxid20034-xid79.txt").replace("Fatal, Link", "Non-fatal, Link")
    assert {r.details["action"] for k, r in judge(tmp_path, log).items() if "nvswitch" in k} == {"watch"}
    assert not [k for k in judge(tmp_path, XID119) if "nvswitch" in k]


def test_a_fatal_sxid_stays_open_in_the_hook_until_the_reboot():
    from verify.scheduler import kernel_events

    lines = kernel_events.failing_lines(read("kernel-log_faulty_gpud-sxid20034-xid79.txt"))
    assert sum("SXid" in line for line in lines) == 4 and any("Xid (PCI:0000:91:00): 79" in line for line in lines)
