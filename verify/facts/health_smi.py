"""One `nvidia-smi --query-gpu` call for every per-GPU health reading, shared by the GPU health checks.

Fields are named with the aliases old and new drivers both accept (`clocks_throttle_reasons.*`
exists in every driver; R535+ also call it `clocks_event_reasons.*`). A driver that rejects a field
(`Field "x" is not a valid field to query`) is asked again without it, so one missing reading
costs that reading, not the whole check.

Where the CSV gives no GPU, `nvidia-smi -q` and then the default table are asked; every output is read in
whatever form it holds (read_any: -q blocks, the table, CSV) and classified for nvidia-smi's own failure forms
(verify.facts.smi_failure). reading() keeps all of it: the GPUs, the failures (a lost GPU, a driver that does
not answer) and what was present but could not be read ("could not read <command>: why", judged ERROR).
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Optional

from verify.facts import smi_failure, smi_q, smi_table
from verify.node import Node

FIELDS = (
    "index", "pci.bus_id", "name",
    "ecc.mode.current", "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure", "remapped_rows.uncorrectable",
    "clocks_throttle_reasons.active", "clocks_throttle_reasons.hw_slowdown",
    "clocks_throttle_reasons.hw_thermal_slowdown", "clocks_throttle_reasons.hw_power_brake_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown", "clocks_throttle_reasons.sw_power_cap",
    "temperature.gpu", "temperature.gpu.tlimit", "temperature.memory",
    "power.draw", "enforced.power.limit",
    "vbios_version",  # for the fleet's uniformity report (node facts: firmware)
    # SRAM and DRAM apart (nvidia-smi --help-query-gpu: "ecc.errors.uncorrected.volatile.sram" / ".dram",
    # volatile = since the driver loaded, aggregate = the GPU's lifetime); drivers without them drop them
    "ecc.errors.uncorrected.volatile.sram", "ecc.errors.uncorrected.volatile.dram",
    "ecc.errors.uncorrected.aggregate.sram", "ecc.errors.uncorrected.aggregate.dram",
)
REQUIRED = ("index", "pci.bus_id", "name")
SPLIT_ECC_FIELDS = FIELDS[-4:]
SRAM_THRESHOLD = "ecc.sram_threshold_exceeded"  # from nvidia-smi -q only (verify.facts.smi_q)
# ECC mode and counters, retired pages, remapped rows, the SRAM split and its RMA flag
MEMORY_FIELDS = FIELDS[3:10] + SPLIT_ECC_FIELDS + (SRAM_THRESHOLD,)
_INVALID = re.compile(r'Field "([^"]+)" is not a valid field to query')
_NOT_A_VALUE = ("n/a", "[n/a]", "[not supported]", "not supported", "")
# What the driver says of each GPU in the default table, when neither the CSV nor `-q` was read.
TABLE_ARGV = ["nvidia-smi"]
# Readings every GPU gives whatever its model: one of them read means the GPU answers.
LIVE_FIELDS = ("temperature.gpu", "power.draw", "memory.used", "ecc.mode.current", "pstate")
READING = "health_smi_reading"  # node.memo key of the whole SmiReading (the tuple stays under "health_smi")


class HealthParseError(ValueError):
    pass


@dataclass
class GpuHealth:
    index: int
    bus_id: str
    name: str
    fields: dict = field(default_factory=dict)  # field name -> text as nvidia-smi printed it (units removed)

    def text(self, name: str) -> Optional[str]:
        """The value, or None when the driver does not report it (N/A, [Not Supported], not asked) or could not
        read it (ERR!, [Unknown Error]: see errors())."""
        value = self.fields.get(name)
        if value is None or value.strip().lower() in _NOT_A_VALUE or smi_failure.error_value(value):
            return None
        return value.strip()

    def errors(self) -> dict:
        """field -> the error nvidia-smi printed in place of its reading ('err!', 'unknown error', 'gpu is lost')."""
        return {name: smi_failure.error_value(value) for name, value in self.fields.items()
                if smi_failure.error_value(value)}

    def answers(self) -> bool:
        """Whether any reading every GPU gives could be read (a GPU that answers none is not reachable)."""
        return any(self.text(name) is not None for name in LIVE_FIELDS)

    def number(self, name: str) -> Optional[float]:
        value = self.text(name)
        if value is None:
            return None
        try:
            return float(value.split()[0])
        except ValueError:
            raise HealthParseError(f"GPU {self.index} {name} = {value!r} is not a number") from None

    def number_or_none(self, name: str) -> Optional[float]:
        """number(), with an unreadable value as None (for deciding whether to ask more, not for judging)."""
        try:
            return self.number(name)
        except HealthParseError:
            return None

    def active(self, name: str) -> Optional[bool]:
        """'Active'/'Yes' -> True, 'Not Active'/'No' -> False, N/A -> None."""
        value = self.text(name)
        if value is None:
            return None
        lowered = value.lower()
        if lowered in ("active", "yes", "enabled"):
            return True
        if lowered in ("not active", "no", "disabled"):
            return False
        raise HealthParseError(f"GPU {self.index} {name} = {value!r} is neither Active/Yes nor Not Active/No")

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id})"


Q_ARGV = ["nvidia-smi", "-q"]
Q_ECC_ARGV = ["nvidia-smi", "-q", "-d", "ECC"]  # the SRAM threshold flag: in -q only, not in --query-gpu


def from_smi_q(text: str) -> list:
    """`nvidia-smi -q` text -> [GpuHealth] with the same field names as the CSV (verify.facts.smi_q)."""
    return [GpuHealth(gpu.index, gpu.bus_id, fields["name"], fields)
            for gpu, fields in ((gpu, smi_q.health_fields(gpu)) for gpu in smi_q.parse(text))]


def _with_sram_threshold(node: Node, gpus: list) -> list:
    """Where a GPU counts SRAM uncorrectable errors, the driver's "SRAM Threshold Exceeded" flag (NVIDIA's
    RMA criterion for SRAM) from `nvidia-smi -q -d ECC`, asked only then."""
    if not any(gpu.number_or_none(name) for gpu in gpus for name in
               ("ecc.errors.uncorrected.aggregate.sram", "ecc.errors.uncorrected.volatile.sram")):
        return gpus
    out = node.run(Q_ECC_ARGV, timeout_s=20.0)
    if not out.ok:
        return gpus
    flags = {gpu.bus_id.lower(): gpu.get("ECC Errors/Aggregate/SRAM Threshold Exceeded")
             for gpu in smi_q.parse(out.stdout)}
    for gpu in gpus:
        flag = flags.get(gpu.bus_id.lower())
        if flag is not None:
            gpu.fields.setdefault(SRAM_THRESHOLD, flag)
    return gpus


def argv(fields=FIELDS) -> list:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"]


def _header_name(column: str) -> str:
    name = column.split(" [")[0].strip()  # "power.draw [W]" -> "power.draw"
    return name.replace("clocks_event_reasons.", "clocks_throttle_reasons.")  # new name -> the alias asked


def parse(text: str) -> list:
    """`nvidia-smi --query-gpu=... --format=csv` (header first) -> [GpuHealth]; columns by header name,
    so wider captures (and the R535+ clocks_event_reasons names) parse the same."""
    try:
        rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]
    except csv.Error as exc:
        raise HealthParseError(f"nvidia-smi output is not CSV: {exc}") from None
    if not rows:
        raise HealthParseError("nvidia-smi printed nothing")
    header = [_header_name(column) for column in rows[0]]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise HealthParseError(f"nvidia-smi header lacks {', '.join(missing)}: {text.strip()[:80]!r}")
    gpus = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise HealthParseError(f"a row has {len(row)} fields, the header {len(header)}")
        values = dict(zip(header, (value.strip() for value in row)))
        if not (values["index"].isascii() and values["index"].isdigit()):
            raise HealthParseError(f"GPU index {values['index']!r} is not a number")
        gpus.append(GpuHealth(int(values["index"]), values["pci.bus_id"], values["name"], values))
    return gpus


@dataclass
class SmiReading:
    """Everything nvidia-smi said about the GPUs in one run: the GPUs read, and what stopped the rest."""
    gpus: list
    reason: str = ""  # why no GPU could be read where nothing failed (not installed, no driver, --root)
    failures: list = field(default_factory=list)  # smi_failure.Failure in any output asked
    unreadable: str = ""  # "could not read <input>: why": an output present but not readable (ERROR, never PASS)
    source: str = ""  # the command whose output gave the GPUs

    def why(self) -> str:
        """The one line the checks say when there are no GPUs to judge."""
        if self.gpus:
            return ""
        said = "; ".join(f.said() for f in self.failures)
        return "; ".join(part for part in (said and f"nvidia-smi: {said}", self.unreadable) if part) or self.reason


def read_any(text: str, what: str) -> tuple:
    """([GpuHealth], unreadable) from whichever form an nvidia-smi output holds: `-q` blocks, the default table,
    or --query-gpu CSV; what names the command for the message. Failure lines (smi_failure) are not GPU rows."""
    blocks = smi_q.parse(text)
    if blocks or smi_q.looks_like_q(text) and not _said_no_gpu(text) and not _lost(text):
        why = smi_q.unreadable(text, blocks, _lost(text))
        return from_smi_q(text), f"could not read {what} (nvidia-smi -q form): {why}" if why else ""
    if smi_table.looks_like_table(text):
        table = smi_table.parse(text)
        gpus = [GpuHealth(g.index, g.bus_id, g.name, dict(g.fields, **{"index": str(g.index), "pci.bus_id": g.bus_id,
                                                                       "name": g.name})) for g in table.gpus]
        if gpus or _lost(text) or _said_no_gpu(text):
            return gpus, ""
        return [], f"could not read {what} (nvidia-smi table form): {table.box_lines} table line(s), no GPU row"
    # a failure message is a line of its own (no comma); a CSV row may hold "[Insufficient Permissions]" cells
    rows = "\n".join(line for line in text.splitlines() if "," in line or not smi_failure.classify(line, "", 0))
    if not rows.strip():
        return [], "" if _lost(text) or _said_no_gpu(text) or smi_failure.classify(text, "", 0) else \
            f"could not read {what}: it printed nothing"
    try:
        return parse(rows), ""
    except HealthParseError as exc:
        usage = " (it printed its usage)" if smi_failure.printed_usage(text) else ""
        return [], f"could not read {what}{usage}: {exc}"


def _lost(text: str) -> int:
    return sum(1 for f in smi_failure.classify(text, "", 0) if f.bus_id)


def _said_no_gpu(text: str) -> bool:
    return any(f.form in ("no-devices", "driver-unreachable", "version-mismatch", "nvml-init")
               for f in smi_failure.classify(text, "", 0))


def query(node: Node) -> tuple:
    """(gpus, reason): the readings, or [] and why none could be had. Memoised for the run (the scheduler's
    NVML reading primes it). Where the CSV query gives no GPU (an old driver, a failure, a capture of another
    form through --inject) `nvidia-smi -q` is asked, then the default table; each output is read in whatever
    form it holds and classified for nvidia-smi's failure forms (reading() keeps them)."""
    if "health_smi" not in node.memo:
        node.memo.pop(READING, None)  # a caller that dropped the memo asks afresh (gpu_burn reads before and after)
        reading(node)
    return node.memo["health_smi"]


def reading(node: Node) -> SmiReading:
    """The whole reading: GPUs, failures, what could not be read (memoised with query())."""
    if READING in node.memo:
        return node.memo[READING]
    if "health_smi" in node.memo:  # primed from NVML (verify.scheduler.nvml_facts)
        gpus, reason = node.memo["health_smi"]
        return SmiReading(list(gpus), reason, source="nvml")
    found = _read(node)
    if found.gpus and found.source == "csv":
        found.gpus = _with_sram_threshold(node, found.gpus)
    node.memo[READING] = found
    node.memo["health_smi"] = (found.gpus, found.why())
    return found


def _read(node: Node) -> SmiReading:
    found = SmiReading([])
    gpus, found.reason, out = _query_csv(node)
    present = []  # (what, output) of every command that answered
    if out is not None:
        present.append(("nvidia-smi --query-gpu", out))
    if not gpus:
        for argv, what in ((Q_ARGV, "nvidia-smi -q"), (TABLE_ARGV, "nvidia-smi")):
            answer = node.run(argv, timeout_s=60.0)
            if answer.missing:
                continue
            present.append((what, answer))
            gpus, _ = read_any(answer.stdout, what)
            if gpus:
                found.source = what
                break
    else:
        found.source = "csv"
    unreadable = []
    for what, answer in present:
        found.failures += [f for f in smi_failure.classify(answer.stdout, answer.stderr, answer.returncode)
                           if f not in found.failures and not _INVALID.search(f.detail or "")]
        if answer.stdout.strip() or answer.returncode == 0:
            _, why = read_any(answer.stdout, what)
            if why:  # even where another command gave the GPUs: what was asked and not read is said
                unreadable.append(why)
    if gpus or not found.failures:
        found.unreadable = next(iter(unreadable), "")
    found.gpus = gpus
    if present and not gpus and not found.failures and not found.unreadable:
        found.reason = found.reason or "nvidia-smi lists no GPU"
    return found


def _query_csv(node: Node) -> tuple:
    """(gpus, reason, output): the CSV query's GPUs, why none, and the last output (None: not installed)."""
    fields, invalid, out = list(FIELDS), None, None
    for _ in range(8):  # at most seven unknown fields dropped (drivers older than R535)
        out = node.run(argv(fields), timeout_s=20.0)
        if out.missing:
            return [], "nvidia-smi is not installed", None
        invalid = _INVALID.search(out.stdout + out.stderr)
        if invalid and invalid.group(1) in fields and invalid.group(1) not in REQUIRED:
            fields.remove(invalid.group(1))
            continue
        if not out.ok:
            message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
            return [], f"nvidia-smi failed: {message[:160]}", out
        gpus, _ = read_any(out.stdout, "nvidia-smi --query-gpu")
        return gpus, "", out
    return [], f"nvidia-smi rejected the health fields (last: {invalid.group(1) if invalid else '?'})", out
