"""`dcgmi diag -j` output -> one row per test and GPU. Total: anything else raises DcgmParseError naming
what is wrong, never another exception.

Two shapes exist (DCGM 4.0 renamed the top key; the release notes list it as a breaking change):
- 3.x: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids": "0,1" or 0, "status": "PASS"|"Pass"|"FAIL"|"WARN"|"SKIP"|"SKIPPED", "warnings": [str or
  {"warning": str}], "info": ...}]}]}], "version"}}; tests lists may hold nulls (seen in DCGM's own
  "real output" test).
- 4.x: {"DCGM Diagnostic": {"test_categories": [... "results": [{"entity_group": "GPU", "entity_id": 0,
  "status": "Pass", "warnings": [{"warning", "error_id", "error_severity", ...}]}], "test_summary":
  {"status"}}], "runtime_error"?}, "metadata": {"version", "Driver Version Detected"}}
  (testing/python3/dcgm_diag_schema.json in NVIDIA/DCGM).

Where `-j` is not available, dcgmi's human-readable table is read instead (parse_table): a category rule
`+-----  Hardware  ----+----+` or `|-----  Metadata  ---+---|`, then `| Test | Pass - All |`, one line per
outcome (`| GPU Memory | Pass - GPU: 1 |` + `|            | Fail - GPU: 0 |`) and `| Warning | ... |` /
`| Info | ... |` rows whose text wraps at the cell's width, mid-word (real fragments:
tests/fixtures/node/health/public/dcgmi-diag-table_*.txt). Every GPU's own outcome is a row: a GPU that
fails one test is a FAIL row naming it and the test, whatever the other GPUs or a summary say.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

STATUSES = {"pass": "PASS", "fail": "FAIL", "warn": "WARN", "warning": "WARN", "skip": "SKIP", "skipped": "SKIP",
            "not run": "SKIP", "notrun": "SKIP"}
TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
MAX_ROWS = 4096  # 16 tests x 8 GPUs is ~130; a bigger document is not dcgmi's


class DcgmParseError(ValueError):
    pass


@dataclass
class DiagRow:
    category: str
    test: str
    status: str  # PASS FAIL WARN SKIP
    gpus: list  # GPU ids the row covers ([] when the test does not say)
    warnings: list = field(default_factory=list)  # texts
    error_ids: list = field(default_factory=list)
    info: str = ""
    # DCGM 4.x's own classification of each warning (dcgm_errors.h dcgmErrorCategory_t / severity), when given
    error_categories: list = field(default_factory=list)
    error_severities: list = field(default_factory=list)


@dataclass
class DiagReport:
    version: str
    driver: str
    rows: list
    runtime_error: str = ""


def _json_part(text: str) -> Any:
    """dcgmi may print a line before the document (DCGM's own test feeds it 'WARNING: ...' first)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DcgmParseError(f"no JSON object in the output: {text.strip()[:80]!r}")
    try:
        return json.loads(text[start:end + 1])
    except (ValueError, RecursionError) as exc:
        raise DcgmParseError(f"not valid JSON: {str(exc)[:120]}") from None


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DcgmParseError(f"{where} is {type(value).__name__}, not text")
    return value


def _status(value: Any, where: str) -> str:
    text = _text(value, where).strip().lower()
    if text not in STATUSES:
        raise DcgmParseError(f"{where} {value!r:.30} is not Pass/Fail/Warn/Skip")
    return STATUSES[text]


def _gpus(result: dict, where: str) -> list:
    if "entity_id" in result:  # 4.x: one entity per result; only GPUs are judged here
        entity = result["entity_id"]
        if isinstance(entity, bool) or not isinstance(entity, int):
            raise DcgmParseError(f"{where}.entity_id {entity!r:.20} is not a number")
        return [entity]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None:
        return []
    if isinstance(ids, int) and not isinstance(ids, bool):
        return [ids]
    words = [w.strip() for w in _text(ids, f"{where}.gpu_ids").split(",") if w.strip()]
    if not all(w.isdigit() and len(w) < 6 for w in words):
        raise DcgmParseError(f"{where}.gpu_ids {ids!r:.40} is not a list of GPU ids")
    return [int(w) for w in words]


def _small_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 16 else None


def _warnings(result: dict, where: str) -> tuple:
    texts, ids, categories, severities = [], [], [], []
    raw = result.get("warnings") or []
    if not isinstance(raw, list):
        raw = [raw]
    for index, item in enumerate(raw):
        if isinstance(item, dict):
            texts.append(_text(item.get("warning", ""), f"{where}.warnings[{index}].warning"))
            for key, into in (("error_id", ids), ("error_category", categories), ("error_severity", severities)):
                if _small_int(item.get(key)) is not None:
                    into.append(item[key])
        else:
            texts.append(_text(item, f"{where}.warnings[{index}]"))
    return texts, ids, categories, severities


def _info(result: dict) -> str:
    info = result.get("info")
    if isinstance(info, list):
        return "; ".join(str(i) for i in info)[:400]
    return str(info)[:400] if info else ""


_CATEGORY_RULE = re.compile(r"^[+|]-{3,}\s+(.+?)\s+-{2,}\+")
_OUTCOME = re.compile(r"^(Pass|Fail|Warn|Warning|Skip|Skipped|Not Run)\b"
                      r"(?:\s*-\s*(?:All|GPUs?:\s*(?P<gpus>[\d,\s]+)))?\s*$", re.I)
_META = {"dcgm version": "version", "driver version detected": "driver"}


def looks_like_table(text: str) -> bool:
    return any(_CATEGORY_RULE.match(line) for line in text.splitlines()[:400])


def _cells(line: str) -> Optional[tuple]:
    """'| name | value |' -> (name, raw value cell, whether the line closes with '|'); None for rules."""
    if not line.startswith("|") or set(line.strip()) <= set("+-=|"):
        return None
    closed = line.rstrip().endswith("|") and line.count("|") >= 3
    parts = line.rstrip().split("|") if closed else line.split("|")
    if len(parts) < 3:
        return None
    return parts[1].strip(), "|".join(parts[2:-1]) if closed else "|".join(parts[2:]), closed


def parse_table(text: str) -> DiagReport:
    """dcgmi diag's human-readable table -> the same rows as the JSON document gives."""
    rows: list = []
    meta = {"version": "", "driver": ""}
    category, note_kind = "", None
    test_rows: list = []  # the outcome rows of the test being read
    notes: dict = {}  # id(row) -> {"Warning": [text], "Info": [text]}
    width = 0  # dcgmi wraps a note at a fixed width inside the cell, mid-word: the chunks join as printed
    for line in text.splitlines():
        rule = _CATEGORY_RULE.match(line)
        if rule:
            category, test_rows, note_kind = rule.group(1).strip(), [], None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name, value, closed = cells
        if closed:
            width = len(value)
        chunk = value[1:width - 2] if width > 3 else value.strip()
        if name.lower() in _META:
            meta[_META[name.lower()]] = value.strip()
            continue
        if name in ("Warning", "Info"):
            note_kind = name if test_rows else None
            if note_kind:
                judged = [r for r in test_rows if r.status in ("FAIL", "WARN")] or test_rows
                for item in judged:
                    notes.setdefault(id(item), {}).setdefault(name, []).append(chunk)
            continue
        if not name and note_kind:
            for item in test_rows:
                texts = notes.get(id(item), {}).get(note_kind)
                if texts:
                    texts[-1] += chunk
            continue
        outcome = _OUTCOME.match(value.strip())
        if not outcome:
            test_rows, note_kind = [], None  # headings ("Diagnostic | Result") and other metadata
            continue
        if name:
            test_rows, note_kind = [], None
        elif not test_rows:
            continue  # an outcome line with no test above it
        test = name or test_rows[0].test
        # A GPU id is a few digits: a longer run of digits is not one (and int() of thousands of digits raises).
        gpus = [int(g) for g in (outcome.group("gpus") or "").replace(" ", "").split(",")
                if g.isascii() and g.isdigit() and len(g) < 6]
        item = DiagRow(category or "?", test, STATUSES[outcome.group(1).lower()], gpus)
        rows.append(item)
        test_rows.append(item)
        if len(rows) > MAX_ROWS:
            raise DcgmParseError(f"more than {MAX_ROWS} results")
    for item in rows:
        found = notes.get(id(item), {})
        item.warnings = [" ".join(text.split()) for text in found.get("Warning", [])]
        item.info = "; ".join(" ".join(text.split()) for text in found.get("Info", []))[:400]
    if not rows:
        raise DcgmParseError("a dcgmi diag table with no test outcome")
    return DiagReport(meta["version"], meta["driver"], rows)


def parse(text: str) -> DiagReport:
    if "{" not in text and looks_like_table(text):
        return parse_table(text)
    data = _json_part(text)
    if not isinstance(data, dict):
        raise DcgmParseError("the JSON document is not an object")
    key = next((k for k in TOP_KEYS if k in data), None)
    if key is None:
        raise DcgmParseError(f"no {' / '.join(repr(k) for k in TOP_KEYS)} object; keys: {sorted(data)[:6]}")
    root = data[key]
    if not isinstance(root, dict):
        raise DcgmParseError(f"{key!r} is not an object")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    version = str(metadata.get("version") or root.get("version") or "")
    driver = str(metadata.get("Driver Version Detected") or root.get("Driver Version Detected") or "")
    runtime_error = root.get("runtime_error") or data.get("runtime_error") or ""
    categories = root.get("test_categories") or []
    if not isinstance(categories, list):
        raise DcgmParseError("test_categories is not a list")
    rows = []
    for c_index, category in enumerate(categories):
        if category is None:
            continue
        if not isinstance(category, dict) or not isinstance(category.get("tests", []), list):
            raise DcgmParseError(f"test_categories[{c_index}] is not a category with a tests list")
        name = str(category.get("category", "?"))
        for t_index, test in enumerate(category.get("tests") or []):
            if test is None:  # DCGM 3.x writes null between tests
                continue
            where = f"{name}.tests[{t_index}]"
            if not isinstance(test, dict):
                raise DcgmParseError(f"{where} is not an object")
            test_name = _text(test.get("name"), f"{where}.name")
            results = test.get("results")
            if not isinstance(results, list):
                raise DcgmParseError(f"{where} ({test_name}) has no results list")
            for r_index, item in enumerate(results):
                here = f"{test_name}.results[{r_index}]"
                if not isinstance(item, dict):
                    raise DcgmParseError(f"{here} is not an object")
                if str(item.get("entity_group", "GPU")).upper() != "GPU":
                    continue  # CPU / NVSwitch entities of 4.x: not what this benchmark judges
                texts, ids, categories, severities = _warnings(item, here)
                rows.append(DiagRow(name, test_name, _status(item.get("status"), f"{here}.status"),
                                    _gpus(item, here), texts, ids, _info(item), categories, severities))
                if len(rows) > MAX_ROWS:
                    raise DcgmParseError(f"more than {MAX_ROWS} results")
    if runtime_error and not isinstance(runtime_error, str):
        runtime_error = json.dumps(runtime_error)[:400]
    if not rows and not runtime_error:
        raise DcgmParseError("no test results and no runtime_error in the document")
    return DiagReport(version, driver, rows, runtime_error)
