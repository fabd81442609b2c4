"""The kernel rules (sysctl key <-> /proc/sys path, value words, `[active]` choices, cpulists) for verify.

Their one home is the collection's plugins/module_utils/kernel_rules.py, which the Ansible modules
import by their collection name. verify reaches the same file from where this package sits, never
from the caller's cwd or environment: next to it in a checkout, an installed collection or a
node's bundle (verify/fleet/bundle.py ships it), under verify/_data in an installed wheel
(setup.py copies it there).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

MODULE_UTILS = Path("plugins", "module_utils")


def load_home(name: str):
    """The collection's plugins/module_utils/<name> (stdlib-only rules shared with the roles), loaded from
    next to this package or verify/_data, never from the caller's cwd or sys.path."""
    home = MODULE_UTILS / name
    package = Path(__file__).resolve().parent
    for source in (package / "_data" / home, package.parent / home):
        if source.is_file():
            spec = importlib.util.spec_from_file_location(f"verify._{Path(name).stem}_home", source)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    raise ImportError(f"verify: {home} is neither in {package / '_data'} nor in {package.parent}")


_home = load_home("kernel_rules.py")
AT_LEAST = _home.AT_LEAST
AT_MOST = _home.AT_MOST
DIRECTIONS = _home.DIRECTIONS
DIRECTION_NAMES = _home.DIRECTION_NAMES
EXACT = _home.EXACT
KernelRuleError = _home.KernelRuleError
LIMIT_UNLIMITED = _home.LIMIT_UNLIMITED
PAM_LIMITS_DIR = _home.PAM_LIMITS_DIR
PAM_LIMITS_FILE = _home.PAM_LIMITS_FILE
SYSTEMD_CONF_DIRS = _home.SYSTEMD_CONF_DIRS
SYSTEMD_CONF_FILE = _home.SYSTEMD_CONF_FILE
higher_limit = _home.higher_limit
interface_name_problem = _home.interface_name_problem
limit_number = _home.limit_number
pam_limit_in_force = _home.pam_limit_in_force
parse_pam_limits = _home.parse_pam_limits
parse_systemd_limits = _home.parse_systemd_limits
MAX_CPUS = _home.MAX_CPUS
PROC_SYS = _home.PROC_SYS
compare = _home.compare
direction_of = _home.direction_of
format_cpulist = _home.format_cpulist
kernel_int = _home.kernel_int
normalise_value = _home.normalise_value
parse_choices = _home.parse_choices
parse_cpulist = _home.parse_cpulist
settle = _home.settle
sysctl_key = _home.sysctl_key
sysctl_key_problem = _home.sysctl_key_problem
sysctl_path = _home.sysctl_path
value_words = _home.value_words
__all__ = list(_home.__all__)
