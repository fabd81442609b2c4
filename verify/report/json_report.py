"""The node report as JSON: the document itself (schema in verify/schema/node_report.v1.json)."""
from __future__ import annotations

import json


def render(report: dict) -> str:
    return json.dumps(report, indent=2, sort_keys=False, default=str) + "\n"
