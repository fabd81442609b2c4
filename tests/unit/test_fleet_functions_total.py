"""Four functions that raised on well-formed but mistyped input are total (issue 53 item 5): the GPU engine's
`measured` field as its readers use it, the fabric reading's time, the clocks description, a PCIe speed such as
".GT/s" (its one home, verify.judging.peaks.pcie_gen_from_speed). Inputs: the real captures each reads, broken
the ways test_readers_total breaks them, and random values.

Hypothesis runs the "ci" profile here (fixed seed, `make test`) and the "fuzz" profile under `make fuzz`
(random seed, FUZZ_EXAMPLES); every property test's name holds "total" so `make fuzz` selects it.
"""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from bench_helpers import fixture, output, scripted_node
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_readers_total import GARBAGE, damaged
from verify.bench import engine_session, gpu_clocks, gpu_engine, nccl
from verify.checks import health_pcie
from verify.engine import RESULT_MARKER, read_result
from verify.fleet import ib_fabric
from verify.judging import peaks
from verify.local_run import peer_access_from_engine

ENGINE_PAYLOADS = [read_result(fixture(name)) for name in ("gpu_engine_h100x1.stdout", "gpu_engine_h200x2.stdout",
                                                           "gpu_engine_sections_h200x4.stdout")]
READ_FIELDS = ("measured", "engine_s", "torch", "nvml", "visible", "gpus", "peer")


@st.composite
def engine_payload(draw):
    """A real engine payload whose fields its readers use are each kept, dropped or any JSON value."""
    payload = dict(draw(st.sampled_from(ENGINE_PAYLOADS)))
    for name in READ_FIELDS:
        choice = draw(st.integers(0, 2))
        if choice == 1:
            payload.pop(name, None)
        elif choice == 2:
            payload[name] = draw(GARBAGE)
    return draw(st.one_of(st.just(payload), damaged([payload])))


@given(engine_payload())
def test_the_engine_s_measured_field_is_total_where_it_is_read(payload):
    """engine_session.record checks the payload; nccl.session_gpus and local_run's health.p2p from CUDA's
    answer read `measured` (set() of a list of lists raised), the report line formats engine_s."""
    session = engine_session.Session(sections=["gpu", "peer"])
    stdout = RESULT_MARKER + json.dumps(payload, allow_nan=True) + "\n"
    engine_session.record(session, ["engine"], output(["engine"], stdout=stdout), 60.0)
    if session.payload is not None:
        measured = session.payload.get("measured")
        assert measured is None or all(isinstance(g, int) and not isinstance(g, bool) for g in measured)
        assert session.payload.get("engine_s") is None or isinstance(session.payload["engine_s"], (int, float))
    gpus, row = nccl.session_gpus(session)
    assert all(isinstance(g, int) for g in gpus) and (row is None or row.reason)
    node = scripted_node(lambda argv: output(argv), root="/nonexistent")
    node.memo[engine_session.MEMO_KEY] = session
    assert isinstance(peer_access_from_engine([], {}, node), list)


def test_a_measured_field_of_the_wrong_shape_leaves_the_payload_unjudged_naming_it():
    from verify.payload_schema import checked_payload

    payload = dict(ENGINE_PAYLOADS[1], measured=[[0], {"1": 1}])
    kept, problems = checked_payload(payload, gpu_engine.PAYLOAD_SCHEMA)
    assert kept is None and problems[0].startswith("measured[0]: expected int")


# ---- the fabric reading's time (verify.fleet.ib_fabric) ----------------------------------------------------------

NOW = 1_800_000_000.0
TIMES = st.one_of(GARBAGE, st.floats(min_value=0, max_value=NOW * 2), st.just(10 ** 400), st.just(NOW),
                  st.floats(min_value=NOW - 40 * 86400, max_value=NOW + 600))


@given(TIMES, TIMES)
def test_the_fabric_reading_interval_is_total(before, read_at):
    minutes, why = ib_fabric.interval_min(before, read_at, NOW)
    if minutes is None:
        assert why
    else:
        assert why == "" and math.isfinite(minutes) and 0 <= minutes <= ib_fabric.MAX_INTERVAL_S / 60


READING = {"read_at": NOW - 3600, "complete": True, "ports": {"0x1/5": {"SymbolErrorCounter": 3}}}


@given(st.one_of(damaged([READING]), GARBAGE))
def test_an_earlier_fabric_reading_of_any_shape_is_total(document):
    with tempfile.TemporaryDirectory(prefix="tf-total-") as root:
        earlier = Path(root, "20261127T220000Z-aaaa", ib_fabric.FABRIC_DIR)
        earlier.mkdir(parents=True)
        (earlier / ib_fabric.READING_NAME).write_text(json.dumps(document, allow_nan=True))
        Path(root, "20261128T220000Z-bbbb").mkdir()
        ports, read_at = ib_fabric.previous_reading(str(Path(root, "20261128T220000Z-bbbb")))
        minutes, _ = ib_fabric.interval_min(read_at, NOW, NOW)
        assert ports is None or isinstance(ports, dict)
        assert minutes is None or 0 <= minutes <= ib_fabric.MAX_INTERVAL_S / 60


# ---- the clocks description (verify.bench.gpu_clocks.describe) ---------------------------------------------------

WINDOW = {"samples": 12, "sm_mhz": {"min": 1755.0, "median": 1980.0, "max": 1980.0},
          "mem_mhz": {"min": 2619.0, "median": 2619.0, "max": 2619.0}, "temp_c": {"min": 40, "median": 52, "max": 61},
          "power_w": {"min": 300.0, "median": 627.5, "max": 690.1}, "reasons": ["gpu_idle", "sw_power_cap"]}


@given(st.one_of(damaged([WINDOW]), GARBAGE))
def test_the_clocks_description_is_total(window):
    text = gpu_clocks.describe(window)
    assert isinstance(text, str) and "nan" not in text.lower().replace("unreadable", "")


def test_the_clocks_description_says_a_bad_reading_unreadable():
    bad = dict(WINDOW, sm_mhz={"min": "x", "median": "1980", "max": 1e309}, temp_c={"median": float("nan")})
    assert gpu_clocks.describe(bad) == ("SM unreadable, mem 2619 MHz, temp_c unreadable, 690 W max, "
                                        "reasons: sw_power_cap")


# ---- a PCIe speed: one home ---------------------------------------------------------------------------------------

@given(st.one_of(st.text(alphabet="0123456789. GTs/PCIe\n٣", max_size=20), GARBAGE))
def test_pcie_speed_in_the_pcie_check_is_total(text):
    assert health_pcie.gen_of(text) in (None, 1, 2, 3, 4, 5, 6)


def test_the_pcie_check_reads_a_speed_with_the_one_reader():
    assert health_pcie.gen_of is peaks.pcie_gen_from_speed
    assert [health_pcie.gen_of(s) for s in (".GT/s", "32.0 GT/s PCIe", "8 GT/s", "Unknown")] == [None, 5, 3, None]


# ---- a node-reported address (verify.safe_io.check_address) ------------------------------------------------------

@given(st.one_of(st.text(max_size=80), st.text(alphabet="0123456789abcdef.:-_,= %\n", max_size=40), GARBAGE))
def test_check_address_is_total_and_passes_only_what_no_tool_splits(value):
    from verify.safe_io import check_address

    try:
        kept = check_address(value, "--master-addr")
    except ValueError as exc:
        assert "--master-addr" in str(exc)
        return
    assert kept == value and not kept.startswith("-")
    assert not any(c in kept for c in ",= %\n\t\0/") and len(kept) <= 253
