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

from verify.safe_io import check_dir_trusted, check_file_trusted

SCHEMA = "tunefleet.desired_state/v1"
SECTIONS = ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu", "verify")


class SpecError(ValueError):
    """The desired state (or what it was built from) is malformed; the message names where."""


# A file every copy of the data has; it tells a data directory from a place that merely exists.
DATA_MARKER = "templates/desired_state.json.j2"


def project_root() -> Path:
    """The directory holding roles/ and templates/: the one place that decides where they are.

    TUNEFLEET_HOME when set (a node's bundle, a playbook run); else the copy an installed wheel
    carries (verify/_data, written by setup.py's build step); else the checkout or installed
    collection this package sits in. Found from this file, never from the caller's cwd.
    TUNEFLEET_HOME must pass verify.safe_io's trust check (its templates, roles and playbooks decide
    what root renders and runs): SpecError naming it and why otherwise.
    """
    env = os.environ.get("TUNEFLEET_HOME")
    if env:
        try:
            check_dir_trusted(env)
        except OSError as exc:
            raise SpecError(f"TUNEFLEET_HOME={env}: {exc.strerror or exc}") from None
        return Path(env)
    package = Path(__file__).resolve().parent
    for candidate in (package / "_data", package.parent):
        if (candidate / DATA_MARKER).is_file():
            return candidate
    # Neither has it: callers then name the file they could not read under the checkout path.
    return package.parent


def _check_trusted(path: str, what: str) -> None:
    """A desired state or vars file decides what root checks, measures and passes to tools: like --inject, only
    one root (or we) alone can change, in a directory that passes the trust check (verify.safe_io)."""
    try:
        check_file_trusted(path)
    except FileNotFoundError:
        return  # the bounded reader says "does not exist" with its own wording
    except OSError as exc:
        raise SpecError(f"{what} {path}: {exc.strerror or exc}") from None


def load_spec_file(path: str) -> dict:
    """A rendered desired state (JSON, or YAML on the controller), read with size and nesting limits."""
    from verify.bounded_load import BoundedLoadError, load_json_bounded, load_yaml_bounded

    _check_trusted(path, "desired state")
    try:
        if path.endswith((".yml", ".yaml")):
            data = load_yaml_bounded(path, what="desired state")
        else:
            data = load_json_bounded(path, what="desired state")
    except BoundedLoadError as exc:
        raise SpecError(str(exc)) from None
    return validate_spec(data, path)


def validate_spec(data: object, origin: str) -> dict:
    if not isinstance(data, dict):
        raise SpecError(f"desired state {origin}: top level must be a mapping, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise SpecError(f"desired state {origin}: schema must be {SCHEMA!r}, got {data.get('schema')!r}")
    for section in SECTIONS:
        if not isinstance(data.get(section), dict):
            raise SpecError(f"desired state {origin}: section {section!r} missing or not a mapping")
    validate_thresholds(data["verify"].get("thresholds"), f"desired state {origin}")
    return data


def validate_thresholds(thresholds: object, origin: str) -> None:
    """verify_thresholds: each key known, each limit a finite number above zero (the rule lives in
    verify.profiles, shared with the profiles' own thresholds)."""
    if thresholds is None:
        return
    if not isinstance(thresholds, dict):
        raise SpecError(f"{origin}: verify_thresholds must be a mapping, got {type(thresholds).__name__}")
    from verify.profiles import KEYS, ProfileError, threshold_from_entry

    for key, entry in thresholds.items():
        if key not in KEYS:
            raise SpecError(f"{origin}: verify_thresholds has unknown key {key!r}; known: {', '.join(sorted(KEYS))}")
        try:
            threshold_from_entry(key, entry, f"{origin}: verify_thresholds")
        except ProfileError as exc:
            raise SpecError(str(exc)) from None


def template_environment(directory: Path, **options):
    """The one Jinja environment tunefleet renders its own templates with (the desired state, the node
    and fleet HTML reports): sandboxed, so a template can call no Python it was not handed, even one
    from a tree that is not ours (jinja2.sandbox.SandboxedEnvironment). Controller side only."""
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(directory)), **options)


def role_defaults(root: Optional[Path] = None) -> dict:
    """Every role's defaults/main.yml merged (role variable names never collide: prefixed)."""
    from verify.bounded_load import BoundedLoadError, decode, read_bounded

    root = root or project_root()
    merged: dict = {}
    for defaults in sorted((root / "roles").glob("*/defaults/main.yml")):
        try:
            text = decode(read_bounded(str(defaults), what="role defaults"), str(defaults))
        except BoundedLoadError as exc:
            raise SpecError(str(exc)) from None
        data = _yaml_load(text, str(defaults)) or {}
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
    env = template_environment(root / "templates", undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        text = env.get_template("desired_state.json.j2").render(**variables)
    except (jinja2.UndefinedError, TypeError, jinja2.exceptions.SecurityError) as exc:
        # StrictUndefined surfaces as UndefinedError, or TypeError once an undefined value is
        # used inside an expression (dict(**undefined)): both mean a role variable is missing.
        hint = "a role variable is missing or of the wrong type"
        raise SpecError(f"rendering the desired state: {exc} ({hint})") from exc
    return validate_spec(json.loads(text), "templates/desired_state.json.j2")


def load_vars_file(path: str) -> dict:
    """An inventory-style vars file (YAML or JSON) used as overrides, read with size and nesting limits."""
    from verify.bounded_load import BoundedLoadError, load_yaml_bounded

    _check_trusted(path, "vars file")
    try:
        data = load_yaml_bounded(path, what="vars file")
    except BoundedLoadError as exc:
        raise SpecError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"vars file {path}: top level must be a mapping")
    return data


def _yaml_load(text: str, origin: str):
    from verify.bounded_load import BoundedLoadError, loads_yaml_bounded

    try:
        return loads_yaml_bounded(text, origin)
    except BoundedLoadError as exc:
        raise SpecError(str(exc)) from None
