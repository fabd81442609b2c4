"""Shared by every test: nothing a test runs may write to this machine's real tunefleet history.

`tunefleet verify` records each run in a history database by default (as root under /var/lib/tunefleet,
else under the user's data directory); TUNEFLEET_HISTORY points every test at a file of its own.
Subprocesses inherit it; a test that builds an environment from scratch must pass --no-history.
"""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory, monkeypatch):
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    monkeypatch.setenv("TUNEFLEET_HISTORY", str(path))
    return path
