"""The desired state: load it from a file, or render it from the role defaults.

There is one copy of every value: the roles' defaults/main.yml. Rendering here uses the
same template (templates/desired_state.json.j2) that playbooks/verify.yml renders.
Rendering needs PyYAML and jinja2 (the controller has both); a node is handed a
rendered file instead (`--spec`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

SCHEMA = "tunefleet.desired_state/v1"
SECTIONS = ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu", "verify")


class SpecError(ValueError):
    """The desired state (or what it was built from) is malformed; the message names where."""


def project_root() -> Path:
    """The repository (or unpacked collection) that holds roles/ and templates/."""
    env = os.environ.get("TUNEFLEET_HOME")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent


def load_spec_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise SpecError(f"cannot read desired state {path}: {exc.strerror}") from exc
    if path.endswith((".yml", ".yaml")):
        data = _yaml_load(text, path)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"desired state {path} is not valid JSON: {exc}") from exc
    return validate_spec(data, path)


def validate_spec(data: object, origin: str) -> dict:
    if not isinstance(data, dict):
        raise SpecError(f"desired state {origin}: top level must be a mapping, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise SpecError(f"desired state {origin}: schema must be {SCHEMA!r}, got {data.get('schema')!r}")
    for section in SECTIONS:
        if not isinstance(data.get(section), dict):
            raise SpecError(f"desired state {origin}: section {section!r} missing or not a mapping")
    return data


def role_defaults(root: Optional[Path] = None) -> dict:
    """Every role's defaults/main.yml merged (role variable names never collide: prefixed)."""
    root = root or project_root()
    merged: dict = {}
    for defaults in sorted((root / "roles").glob("*/defaults/main.yml")):
        data = _yaml_load(defaults.read_text(encoding="utf-8"), str(defaults)) or {}
        if not isinstance(data, dict):
            raise SpecError(f"{defaults}: defaults must be a mapping")
        merged.update(data)
    return merged


def render_spec(overrides: Optional[dict] = None, hostname: str = "localhost", root: Optional[Path] = None) -> dict:
    """Render templates/desired_state.json.j2 from role defaults + overrides (inventory-style vars)."""
    import jinja2  # controller-side only

    root = root or project_root()
    variables = role_defaults(root)
    variables.update(overrides or {})
    variables["inventory_hostname"] = hostname
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root / "templates")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    try:
        text = env.get_template("desired_state.json.j2").render(**variables)
    except (jinja2.UndefinedError, TypeError) as exc:
        # StrictUndefined surfaces as UndefinedError, or TypeError once an undefined value is
        # used inside an expression (dict(**undefined)): both mean a role variable is missing.
        hint = "a role variable is missing or of the wrong type"
        raise SpecError(f"rendering the desired state: {exc} ({hint})") from exc
    return validate_spec(json.loads(text), "templates/desired_state.json.j2")


def load_vars_file(path: str) -> dict:
    """An inventory-style vars file (YAML or JSON) used as overrides."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read vars file {path}: {exc.strerror}") from exc
    data = _yaml_load(text, path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"vars file {path}: top level must be a mapping")
    return data


def _yaml_load(text: str, origin: str):
    try:
        import yaml
    except ImportError as exc:
        raise SpecError(f"{origin}: reading YAML needs PyYAML; pass a rendered JSON desired state with --spec") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{origin} is not valid YAML: {exc}") from exc
