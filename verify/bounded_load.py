"""Reading files a user hands us (--spec, --vars, profiles, node reports) with limits.

A file is read only up to a size, its nesting is counted before anything recurses into it, and
every refusal is one `BoundedLoadError` naming the file. Why: json and PyYAML recurse per nesting
level, so a deeply nested file raised RecursionError and ended the run; YAML aliases can expand a
small file into a huge document ("billion laughs").

Standard library only (the node side runs on a bare python3); PyYAML is imported when a YAML file
is read, on the controller.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Optional

from verify.safe_io import TooLargeError, read_capped

MAX_BYTES = 16 << 20  # a rendered desired state is ~10 KB, a node report ~100 KB
MAX_DEPTH = 64  # the deepest real document (a node report's details) nests ~8 levels
MAX_NODES = 2_000_000  # values after YAML aliases are expanded


class BoundedLoadError(ValueError):
    """A user file is too big, too deep, not UTF-8 or not JSON/YAML; the message names the file."""


def read_bounded(path: str, max_bytes: int = MAX_BYTES, what: str = "file", follow_symlinks: bool = False) -> bytes:
    """The file's bytes through the one bounded reader (verify.safe_io.read_capped): refused when larger
    than max_bytes (read no further), a symlink (unless follow_symlinks), a FIFO or a device."""
    try:
        return read_capped(path, max_bytes, follow_symlinks=follow_symlinks)
    except TooLargeError:
        raise BoundedLoadError(f"{what} {path} is larger than {max_bytes} bytes: refused") from None
    except OSError as exc:
        raise BoundedLoadError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def decode(data: bytes, origin: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BoundedLoadError(f"{origin}: not UTF-8 text (byte {exc.start}, line {line})") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a file may hold")


def loads_json_bounded(text: str, origin: str, max_depth: int = MAX_DEPTH, allow_nan: bool = False) -> Any:
    """JSON text to data; too deep, NaN/Infinity (unless allow_nan) or bad JSON -> BoundedLoadError."""
    hooks: dict = {} if allow_nan else {"parse_constant": _refuse_constant}
    try:
        data = json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BoundedLoadError(f"{origin} is not valid JSON: {exc.msg} at {where}") from None
    except RecursionError:  # the C decoder stops near the interpreter's recursion limit
        raise BoundedLoadError(f"{origin}: nested deeper than {max_depth} levels: refused") from None
    except ValueError as exc:  # NaN refused, a 5000-digit integer
        raise BoundedLoadError(f"{origin}: {exc}") from None
    if expanded_shape(data)[0] > max_depth:
        raise BoundedLoadError(f"{origin}: nested deeper than {max_depth} levels: refused")
    return data


def load_json_bounded(path: str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, what: str = "file",
                      allow_nan: bool = False) -> Any:
    origin = f"{what} {path}"
    return loads_json_bounded(decode(read_bounded(path, max_bytes, what), origin), origin, max_depth, allow_nan)


_BLOCK_ITEMS = re.compile(r"^(?:[ \t]*-(?:[ \t]+|$))*")


def _flow_depth(line: str) -> int:
    depth = deepest = 0
    for char in line:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def _yaml_prescan(text: str, origin: str, max_depth: int) -> None:
    """One line nesting past max_depth ("- - - - ..." or "[[[[...") is refused before PyYAML's
    scanner sees it: its simple-key bookkeeping grows with the depth, so such a line costs time
    quadratic in its length (minutes for 100,000 levels)."""
    for number, line in enumerate(text.splitlines(), 1):
        deep = _BLOCK_ITEMS.match(line).group(0).count("-") > max_depth
        if not deep and line.count("[") + line.count("{") > max_depth:
            deep = _flow_depth(line) > max_depth
        if deep:
            raise BoundedLoadError(f"{origin}: nested deeper than {max_depth} levels (line {number}): refused")


def _yaml_event_depth(text: str, origin: str, max_depth: int) -> None:
    """PyYAML's composer recurses per level: count the depth from its (iterative) event stream first."""
    import yaml

    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > max_depth:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise BoundedLoadError(f"{origin}: nested deeper than {max_depth} levels (line {line}): refused")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        raise BoundedLoadError(f"{origin} is not valid YAML: {exc}") from None


def expanded_shape(data: Any) -> tuple:
    """(depth, value count) of data with shared (aliased) parts counted each time they appear.

    Iterative and memoized by object id, so a "billion laughs" document costs its own size here.
    """
    memo: dict = {}
    stack: list = [(data, False)]
    while stack:
        item, ready = stack.pop()
        if not isinstance(item, (dict, list)) or id(item) in memo:
            continue
        children = [c for c in (list(item.keys()) + list(item.values()) if isinstance(item, dict) else item)
                    if isinstance(c, (dict, list))]
        if ready:
            depth = 1 + max((memo[id(c)][0] for c in children), default=0)
            count = 1 + len(item) + sum(memo[id(c)][1] for c in children)
            memo[id(item)] = (depth, min(count, MAX_NODES * 10))
            continue
        stack.append((item, True))
        stack.extend((c, False) for c in children if id(c) not in memo)
    return memo.get(id(data), (0, 1))


def loads_yaml_bounded(text: str, origin: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    try:
        import yaml
    except ImportError as exc:
        raise BoundedLoadError(f"{origin}: reading YAML needs PyYAML; pass a rendered JSON file instead") from exc
    _yaml_prescan(text, origin, max_depth)
    _yaml_event_depth(text, origin, max_depth)
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError, OverflowError) as exc:
        raise BoundedLoadError(f"{origin} is not valid YAML: {exc}") from None
    depth, count = expanded_shape(data)
    if depth > max_depth:
        raise BoundedLoadError(f"{origin}: nested deeper than {max_depth} levels once aliases are expanded: refused")
    if count > max_nodes:
        raise BoundedLoadError(f"{origin}: more than {max_nodes} values once aliases are expanded: refused")
    return data


def load_yaml_bounded(path: str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, what: str = "file") -> Any:
    origin = f"{what} {path}"
    return loads_yaml_bounded(decode(read_bounded(path, max_bytes, what), origin), origin, max_depth)


def finite_number(value: Any) -> Optional[float]:
    """value as a finite float, or None (bool, non-number, NaN, infinity, too big for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def nesting_depth(data: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply data nests (0 for a scalar), counted without recursion; stops once past limit.

    Cheaper than expanded_shape (no counts, no alias memo): JSON has no aliases, and the fleet
    reads 10,000 node reports."""
    deepest = 0
    stack: list = [(data, 1)] if isinstance(data, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest


def loads_json_bytes_bounded(data: bytes, origin: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON bytes of a file tunefleet wrote (a node report, a side file) to data; BoundedLoadError naming
    origin when not UTF-8, not JSON or nested past max_depth. NaN is kept: a saved report may hold one.

    orjson when the controller has it (decoding is most of a 10,000-host report's time), else json."""
    try:
        import orjson
    except ImportError:
        orjson = None
    if orjson is not None:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if isinstance(exc.__cause__, UnicodeDecodeError) or "utf-8" in str(exc).lower():
                raise BoundedLoadError(f"{origin}: not UTF-8 text") from None
            # NaN, integers beyond 64 bits and nesting past 1024 levels: the standard library
            # decides, and names the line and column of what is not JSON.
            parsed = loads_json_bounded(decode(data, origin), origin, max_depth, allow_nan=True)
    else:
        parsed = loads_json_bounded(decode(data, origin), origin, max_depth, allow_nan=True)
    if nesting_depth(parsed, max_depth) > max_depth:
        raise BoundedLoadError(f"{origin}: nested deeper than {max_depth} levels: refused")
    return parsed
