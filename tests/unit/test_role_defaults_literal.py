"""Every role default is a plain literal (docs/architecture.md "Role variables"): a default holding Jinja is
evaluated wherever the defaults are read outside the role (verify.desired.role_defaults for `verify --local`,
molecule's prepare, which merges every role's defaults), and there `role_path` or another role's variable is
undefined: molecule failed on exactly that (scheduler_hooks' role_path, verify_node's verify_benchmarks)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = sorted(REPO.glob("roles/*/defaults/main.yml"))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def templated_defaults(path: Path) -> list:
    defaults = yaml.safe_load(path.read_text()) or {}
    return sorted(name for name, value in defaults.items()
                  if any("{{" in text or "{%" in text for text in _strings(value)))


@pytest.mark.parametrize("path", DEFAULTS, ids=[p.parts[-3] for p in DEFAULTS])
def test_role_defaults_hold_no_jinja(path):
    assert templated_defaults(path) == [], f"{path.relative_to(REPO)}: resolve these in the role's vars/ or tasks"


def test_the_check_sees_a_templated_default(tmp_path):
    planted = tmp_path / "main.yml"
    planted.write_text('x_dir: "{{ role_path }}/../deploy"\nx_plain: 3\nx_list: [a, "{% if b %}c{% endif %}"]\n')
    assert templated_defaults(planted) == ["x_dir", "x_list"]
