"""The desired state of a hook run given no --spec: rendered once, then read back from the state directory.

Rendering from the role defaults imports jinja2 and PyYAML and parses every role's defaults/main.yml
(0.39 s a run on the GPU machine): too slow for a prolog started at every job. The installed hooks pass
`--spec` (roles/scheduler_hooks renders it at install); without it the rendered document is kept in the
state directory as `desired_state.json`, under a SHA-256 of everything the rendering reads: the template,
every role's defaults file, the profile's name and file, each --vars file, the host name and tunefleet's
version. A run whose inputs hash to the same key reads the document back (JSON, validated as a --spec file
is); anything else (no cache, another key, a corrupt or planted file, an unreadable input) renders anew and
rewrites it atomically. A cache is never fatal and never trusted beyond its key and the validation.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Callable, Optional

from verify import __version__
from verify.bounded_load import loads_json_bounded
from verify.desired import DATA_MARKER, project_root, validate_spec
from verify.profiles import PROFILE_DIR
from verify.safe_io import PRIVATE_FILE, read_capped, read_capped_fd, write_in_dir
from verify.scheduler.state import open_state_dir

FILE_NAME = "desired_state.json"
SCHEMA = "tunefleet.desired_state_cache/v1"
MAX_BYTES = 4 << 20  # a rendered desired state is ~10 KB
MAX_INPUT_BYTES = 16 << 20  # as verify.bounded_load reads the defaults and vars files


def inputs_key(profile: Optional[str], vars_files: list, host: str) -> Optional[str]:
    """SHA-256 of what rendering reads, or None when one of them cannot be read (rendering then says why)."""
    root = project_root()
    digest = hashlib.sha256()

    def feed(label: str, data: bytes) -> None:
        for part in (label.encode(), data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)

    feed("version", __version__.encode())
    feed("host", host.encode())
    feed("root", str(root).encode())
    files = [("template", root / DATA_MARKER)]
    defaults = sorted((root / "roles").glob("*/defaults/main.yml"))  # the ones verify.desired.role_defaults merges
    files += [(f"defaults {path.parent.parent.name}", path) for path in defaults]
    if profile:
        feed("profile", profile.encode())
        files.append(("profile file", PROFILE_DIR / f"{profile}.json"))
    files += [(f"vars {path}", path) for path in vars_files]
    try:
        for label, path in files:
            feed(label, read_capped(str(path), MAX_INPUT_BYTES))
    except (OSError, ValueError):
        return None
    return digest.hexdigest()


def load(directory: str, key: str) -> Optional[dict]:
    """The cached desired state under `key`, or None (missing, another key, corrupt, a link, unreadable)."""
    try:
        dir_fd = open_state_dir(directory)
    except OSError:
        return None
    try:
        fd = os.open(FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                     dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        data = read_capped_fd(fd, f"{directory}/{FILE_NAME}", MAX_BYTES)
        cached = loads_json_bounded(data.decode("utf-8"), f"{directory}/{FILE_NAME}")
        if not isinstance(cached, dict) or cached.get("schema") != SCHEMA or cached.get("key") != key:
            return None
        return validate_spec(cached.get("spec"), f"{directory}/{FILE_NAME}")
    except (OSError, ValueError):  # SpecError, BoundedLoadError and UnicodeDecodeError are ValueErrors
        return None
    finally:
        os.close(fd)


def save(directory: str, key: str, spec: dict) -> None:
    """Keep the rendered desired state for the next run; a failure only costs that run a new rendering."""
    try:
        dir_fd = open_state_dir(directory)
        try:
            write_in_dir(dir_fd, FILE_NAME, json.dumps({"schema": SCHEMA, "key": key, "spec": spec}), PRIVATE_FILE)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def cached_spec(directory: str, profile: Optional[str], vars_files: list, host: str,
                render: Callable[[], dict]) -> tuple:
    """(desired state, "cache" or "rendered"): read back when its inputs did not change, else render() and
    keep it. `render` raises SpecError/ValueError on bad input, which is never cached."""
    key = inputs_key(profile, vars_files, host) if directory else None
    if key is not None:
        spec = load(directory, key)
        if spec is not None:
            return spec, "cache"
    spec = render()
    if key is not None:
        save(directory, key, spec)
    return spec, "rendered"
