"""The default `nvidia-smi` table (no arguments): the form every bug report and forum thread pastes, read into
the --query-gpu field names the health judges read (verify.facts.health_smi.FIELDS).

Each GPU is a box of three-cell lines (R470 and earlier 79 columns wide, R525+ 91; the cells are found by the
'|' between them, never by column):

    |   0  Tesla V100-PCIE...  On   | 00008ED0:00:00.0 Off |                    0 |
    | N/A   29C    P0   ERR! / 250W |    593MiB / 16160MiB |      0%      Default |

first line: index, name, persistence mode | bus id, display | volatile uncorrectable ECC count;
second: fan, temperature, performance state, power draw / cap | memory | utilisation, compute mode.
A reading the driver could not take is printed `ERR!` (kept as printed: the judge sees it). Total: any text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINES = 20_000
_HEADER = re.compile(r"NVIDIA-SMI\s+\S+.*Driver Version", re.I)
_FIRST = re.compile(r"^\s*(\d{1,3})\s+(.*?)\s+(On|Off|N/A|ERR!)\s*$")
_BUS = re.compile(r"^\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\b")
_POWER = re.compile(r"(\S+)\s*/\s*(\S+)\s*$")


@dataclass
class TableGpu:
    index: int
    bus_id: str
    name: str
    fields: dict = field(default_factory=dict)  # --query-gpu name -> value as printed (units removed)


@dataclass
class Table:
    has_header: bool
    gpus: list = field(default_factory=list)
    box_lines: int = 0  # lines of GPU boxes seen, read or not


def _cells(line: str):
    parts = line.split("|")
    if len(parts) != 5 or parts[0].strip() or parts[4].strip():
        return None
    return [p.strip() for p in parts[1:4]]


def _number(token: str, unit: str) -> str:
    """'29C' -> '29', '250W' -> '250', 'ERR!' / 'N/A' kept as printed."""
    return token[: -len(unit)] if token.endswith(unit) and token[: -len(unit)].replace(".", "", 1).isdigit() else token


def _second_line(cells: list, gpu: TableGpu) -> None:
    power = _POWER.search(cells[0])
    head = cells[0][: power.start()].split() if power else cells[0].split()
    if power:
        gpu.fields["power.draw"] = _number(power.group(1), "W")
        gpu.fields["enforced.power.limit"] = _number(power.group(2), "W")
    names = ("fan.speed", "temperature.gpu", "pstate")[-len(head[-3:]):] if head else ()
    for name, token in zip(names, head[-3:]):
        gpu.fields[name] = _number(token, "C") if name == "temperature.gpu" else token.rstrip("%")
    memory = cells[1].split("/")
    if len(memory) == 2:
        gpu.fields["memory.used"] = _number(memory[0].strip(), "MiB")
        gpu.fields["memory.total"] = _number(memory[1].strip(), "MiB")
    elif cells[1]:
        gpu.fields["memory.used"] = cells[1]
    util = cells[2].split()
    if util:
        gpu.fields["utilization.gpu"] = util[0].rstrip("%")


def parse(text: str) -> Table:
    """The table's GPUs in the order printed; a box the reader cannot place still counts in box_lines."""
    table = Table(bool(_HEADER.search(text or "")))
    current = None
    for number, line in enumerate((text or "").splitlines()):
        if number >= MAX_LINES:
            break
        cells = _cells(line)
        if cells is None:
            current = None if line.startswith("+") or not line.strip() else current
            continue
        first, bus = _FIRST.match(cells[0]), _BUS.match(cells[1])
        if first and bus:
            table.box_lines += 1
            current = TableGpu(int(first.group(1)), bus.group(1), first.group(2).strip(),
                               {"persistence_mode": first.group(3)})
            ecc = cells[2].split()
            if ecc:
                current.fields["ecc.errors.uncorrected.volatile.total"] = ecc[-1]
            table.gpus.append(current)
        elif current is not None and "pstate" not in current.fields and "power.draw" not in current.fields:
            table.box_lines += 1
            _second_line(cells, current)
    return table


def looks_like_table(text: str) -> bool:
    return bool(_HEADER.search(text or "")) or any(_cells(line) for line in (text or "").splitlines()[:200])
