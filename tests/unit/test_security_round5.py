"""The root re-review of 2026-12-07 (issue 53 items 7-9): each attack planted as another user (`nobody`, files it
owns or can write through an ACL), and each test asserts that the attacker's marker never appears, not only that
something was refused."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

from other_user import give, needs_root, shared_dir  # noqa: E402

from verify.runner import KEPT_SETTINGS, clean_env, run_command  # noqa: E402

# Settings that make the process that reads them load a library or read more settings from a file
# (docs/security.md rule 3): never passed on, whatever the caller's environment holds.
LOADERS = ("CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
           "NCCL_CONF_FILE", "UCX_MODULE_DIR", "OMP_TOOL_LIBRARIES", "NVSHMEM_BOOTSTRAP_PLUGIN", "NCCL_DEBUG_FILE",
           "NCCL_TOPO_DUMP_FILE", "CUDA_CACHE_PATH", "NCCL_GRAPH_DUMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


@needs_root
@pytest.mark.parametrize("name", LOADERS)
def test_a_library_named_in_the_callers_environment_never_reaches_a_tool_or_engine(tmp_path, monkeypatch, name):
    from verify.engine import engine_argv, engine_env

    planted = shared_dir(tmp_path / "nobody")
    library = Path(planted, "MARKER-libinject.so")
    library.write_bytes(b"\x7fELF")
    give(library)
    monkeypatch.setenv(name, str(library))
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # a named setting the operator set on purpose: kept
    tool = run_command(["/usr/bin/env"])
    engine = run_command(engine_argv("json.tool", ["--help"])[:3] + ["-c", "import os; print(dict(os.environ))"],
                         env=engine_env())
    assert tool.ok and engine.ok, (tool.stderr, engine.stderr)
    for out in (tool.stdout, engine.stdout):
        assert "MARKER-libinject" not in out and name not in out
    assert "NCCL_DEBUG=WARN" in tool.stdout


def test_the_kept_settings_are_names_never_a_prefix(monkeypatch):
    for name in LOADERS:
        monkeypatch.setenv(name, "/x")
        assert name not in KEPT_SETTINGS
    monkeypatch.setenv("NCCL_ANYTHING_NEW", "1")
    assert "NCCL_ANYTHING_NEW" not in clean_env() and all(name not in clean_env() for name in LOADERS)
    assert all(name.isupper() or name == "LANG" for name in KEPT_SETTINGS)
