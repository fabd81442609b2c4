"""Placeholder replaced below."""

from __future__ import annotations


def run(spec, profile, node, overrides=None) -> list:
    return []
