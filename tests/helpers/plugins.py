"""Load one of the collection's plugin files (plugins/<kind>/<name>.py), or a molecule harness script,
as a module, for tests."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
# Modules import the collection's module_utils by their Ansible name: the link `make venv` makes.
sys.path.insert(0, str(ROOT / ".cache" / "collections"))


def load_file(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def load_plugin(kind: str, name: str) -> ModuleType:
    return load_file(ROOT / "plugins" / kind / f"{name}.py", f"tf_{kind}_{name}")


def load_molecule_file(name: str) -> ModuleType:
    """One of the scripts the molecule scenarios install on the test node (molecule/shared/files/)."""
    return load_file(ROOT / "molecule" / "shared" / "files" / f"{name}.py", f"molecule_{name}")
