"""Shared by every test: nothing a test runs may write to this machine's real tunefleet history.

`tunefleet verify` records each run in a history database by default (as root under /var/lib/tunefleet,
else under the user's data directory); TUNEFLEET_HISTORY points every test at a file of its own.
Subprocesses inherit it; a test that builds an environment from scratch must pass --no-history.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The property tests' budgets, one home: a fixed seed and 40 examples in `make test`, a random seed and
# FUZZ_EXAMPLES (default 1500) in `make fuzz` (TUNEFLEET_HYPOTHESIS_PROFILE=fuzz).
settings.register_profile("ci", derandomize=True, max_examples=40, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", derandomize=False, max_examples=int(os.environ.get("FUZZ_EXAMPLES", "1500")),
                          deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("TUNEFLEET_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory, monkeypatch):
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    monkeypatch.setenv("TUNEFLEET_HISTORY", str(path))
    return path


@pytest.fixture
def reachable():
    """A fresh root-owned 0755 directory in /tmp that `nobody` can reach (pytest's tmp_path sits under a
    0700 directory), for the planted-attack tests; removed afterwards whatever happens."""
    base = Path(tempfile.mkdtemp(prefix="tunefleet-attack-test."))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)
