"""Preflight: is every input something THIS host can take? Judged before anything changes.

Pure functions over a root tree (`<root>/proc`, `<root>/sys`, `<root>/lib/modules`) and the role
variables as Ansible passes them, so tests run them on fake trees. A host that merely lacks the
hardware a role tunes (no NVMe, no cpufreq) is not a problem here: that role skips it.
Standard library only: this runs on the node's own python3.
"""
from __future__ import annotations

import difflib
import fnmatch
import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import kernel_rules, nics, sysctl_ranges
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.block_devices import skip_reason

MTU_MIN, MTU_MAX = 68, 65535
REBOOT_POLICIES = ("never", "if_needed")
HUGEPAGE_DIRS = {"memory_hugepages_2m": "hugepages-2048kB", "memory_hugepages_1g": "hugepages-1048576kB"}
LIMIT_NAMES = ("limits_memlock", "limits_nofile", "limits_nproc", "limits_stack")
_NCCL_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")
_MAXMTU_TEXT = re.compile(r"\bmaxmtu (\d+)")
BOOLEAN_REASON = "a YAML boolean (yes/no/true/false/on/off): write 0/1 or quote the intended string"
GOVERNORS = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_available_governors"

# ip_details(interface) -> output of `ip -d -j link show dev X`, or None when ip is unavailable.
IpDetails = Callable[[str], Optional[str]]


NO_VALUE = object()  # a Problem about a variable's name, not its value


@dataclass(frozen=True)
class Problem:
    variable: str
    value: Any
    reason: str

    def message(self, host: str) -> str:
        if self.value is NO_VALUE:
            return f"host {host}: {self.variable}: {self.reason}"
        return f"host {host}: {self.variable} = {self.value!r}: {self.reason}"


def on_root(root: str, node_path: str) -> str:
    """Where a node path lives under root (tests judge fake trees); the node's own path for "/"."""
    return node_path if root in ("", "/") else os.path.join(root, node_path.lstrip("/"))


def _read(root: str, node_path: str) -> Optional[str]:
    try:
        with open(on_root(root, node_path), encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def choices(text: str) -> List[str]:
    """`[mq-deadline] none` -> ['mq-deadline', 'none']."""
    return kernel_rules.parse_choices(text)[1]


def is_plain_int(value: Any) -> bool:
    """YAML's yes/no/true/false arrive as bool, which Python also counts as int."""
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value: Any) -> Optional[int]:
    """An integer, or digits in a string (what `-e network_mtu=9000` passes); None otherwise."""
    if is_plain_int(value):
        return value
    if isinstance(value, str):
        return kernel_rules.kernel_int(value)  # 5000 digits: not a number any setting takes
    return None


TRUE_WORDS = ("true", "yes", "on", "1", "y", "t")
FALSE_WORDS = ("false", "no", "off", "0", "n", "f")


def as_bool(value: Any) -> Optional[bool]:
    """A flag as Ansible's `| bool` reads it (`-e gpu_enabled=false` is the string 'false')."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def _bool_problem(variable: str, value: Any) -> Optional[Problem]:
    if isinstance(value, bool):
        return Problem(variable, value, BOOLEAN_REASON)
    return None


# ---------------------------------------------------------------- sysctl

def sysctl_path(key: str) -> str:
    """`net.ipv4.conf.eth0.rp_filter` -> /proc/sys/net/ipv4/conf/eth0/rp_filter; a key with '/' is already a path
    (needed for names holding dots, e.g. VLAN `eth0.100`). The rule lives in kernel_rules."""
    return kernel_rules.sysctl_path(key)


def _sysctl_writable(root: str, key: str) -> Optional[str]:
    where = on_root(root, sysctl_path(key))
    if not os.path.isfile(where):
        return "no such key under /proc/sys on this host (kernel lacks it, or its module is not loaded)"
    mode = os.stat(where).st_mode
    if not mode & 0o200 or not os.access(where, os.W_OK):
        return "read-only on this host (/proc/sys mounted read-only, e.g. in a container, or a read-only key)"
    return None


def _sysctl_value_problem(value: Any) -> Optional[str]:
    if isinstance(value, bool):
        return BOOLEAN_REASON
    if is_plain_int(value):
        return None
    if not isinstance(value, str):
        return f"must be a string or an integer, not {type(value).__name__}"
    if not value.strip() or "\n" in value:
        return "must be one non-empty line"
    return None


def _shape_problem(current: Optional[str], value: Any) -> Optional[str]:
    """A key that holds N integers (tcp_rmem: 3) must be given N integers."""
    if current is None:
        return None
    now = kernel_rules.value_words(current)
    if not now or not all(t.lstrip("-").isdigit() for t in now):
        return None
    wanted = kernel_rules.value_words(value)
    if len(wanted) != len(now) or not all(t.lstrip("-").isdigit() for t in wanted):
        return f"this key holds {len(now)} integer(s) (now {current!r}); the value does not parse as that"
    return None


# What the kernel refuses for the keys the roles set: asked of the running kernel where it can be,
# modelled per kernel version where not (one home: sysctl_ranges).
PORT_FLOOR_KEY = sysctl_ranges.PORT_FLOOR_KEY


def sysctl_range_problem(root: str, key: str, value: Any, settings: Dict[str, Any],
                         kernel: Optional[sysctl_ranges.KernelRanges] = None) -> Optional[str]:
    """Why the kernel would refuse this value of a key it has, or None (unknown keys pass). `kernel`
    holds the kernel's answers for a whole run (check_sysctl builds it once); without it this one
    value is asked."""
    kernel = kernel or sysctl_ranges.KernelRanges(root, [(key, value)])
    problem = kernel.problem(key, value)
    if problem or key != sysctl_ranges.PORT_RANGE_KEY:
        return problem
    # The kernel also refuses a range reaching below the unprivileged port start (1024 by default).
    first = int(kernel_rules.value_words(value)[0])
    floor = as_int(settings.get(PORT_FLOOR_KEY, _read(root, sysctl_path(PORT_FLOOR_KEY))))
    if floor is not None and first < floor:
        return (f"the first port {first} is below {PORT_FLOOR_KEY} ({floor}), which the kernel refuses; "
                f"start at {floor} or above")
    return None


def congestion_control_offered(root: str, name: str) -> bool:
    available = choices(_read(root, "/proc/sys/net/ipv4/tcp_available_congestion_control") or "")
    if name in available:
        return True
    # Setting an algorithm auto-loads its module, so an installed module counts as available.
    release = _read(root, "/proc/sys/kernel/osrelease") or ""
    pattern = on_root(root, f"/lib/modules/{release}/kernel/net/ipv4/tcp_{name}.ko*")
    return bool(release) and bool(glob.glob(pattern))


def check_sysctl(root: str, variables: Dict[str, Any]) -> List[Problem]:
    problems: List[Problem] = []
    merged: Dict[str, tuple] = {}
    for variable in ("sysctl_settings", "sysctl_extra_settings"):
        settings = variables.get(variable)
        if settings is None:
            continue
        if not isinstance(settings, dict):
            problems.append(Problem(variable, settings, "must be a mapping of sysctl key to value"))
            continue
        for key, value in settings.items():
            merged[str(key)] = (variable, value)
    skip = variables.get("sysctl_skip_keys") or []
    if not isinstance(skip, list):
        problems.append(Problem("sysctl_skip_keys", skip, "must be a list of sysctl keys"))
        skip = []
    exact = variables.get("sysctl_exact_keys") or []
    if not isinstance(exact, list) or not all(isinstance(key, str) for key in exact):
        problems.append(Problem("sysctl_exact_keys", exact, "must be a list of sysctl keys"))
    else:
        for key in exact:
            if kernel_rules.sysctl_key_problem(key):
                problems.append(Problem("sysctl_exact_keys", key,
                                        "is not a sysctl key (expected e.g. vm.max_map_count)"))
            elif key not in merged:
                problems.append(Problem("sysctl_exact_keys", key,
                                        "names a key that neither sysctl_settings nor sysctl_extra_settings sets"))
    kernel = sysctl_ranges.KernelRanges(root, [(key, value) for key, (_, value) in merged.items() if key not in skip])
    for key, (variable, value) in sorted(merged.items()):
        if key in skip:
            continue
        label = f"{variable}[{key!r}]"
        if kernel_rules.sysctl_key_problem(key):
            problems.append(Problem(label, value, "is not a sysctl key (expected e.g. net.core.rmem_max)"))
            continue
        reason = _sysctl_value_problem(value) or _sysctl_writable(root, key)
        if reason is None:
            reason = _shape_problem(_read(root, sysctl_path(key)), value)
        if reason is None:
            reason = sysctl_range_problem(root, key, value, {k: v for k, (_, v) in merged.items()}, kernel)
        if reason is None and key == "net.ipv4.tcp_congestion_control" and not congestion_control_offered(root, value):
            offered = _read(root, "/proc/sys/net/ipv4/tcp_available_congestion_control")
            reason = f"not available here (tcp_available_congestion_control: {offered!r}; no tcp_{value} module)"
        if reason:
            problems.append(Problem(label, value, reason))
    return problems


# ---------------------------------------------------------------- network

def max_mtu_from_ip(output: str) -> Optional[int]:
    """The NIC's maximum MTU from `ip -d -j link show dev X` (JSON) or `ip -d link show dev X` (text).
    None when unknown; 0 means the driver sets no limit (loopback)."""
    text = output.strip()
    if text.startswith("["):
        try:
            links = json.loads(text)
        except (ValueError, RecursionError):  # `ip -j` output cut short or of an unexpected shape
            return None
        first = links[0] if isinstance(links, list) and links else None
        value = first.get("max_mtu") if isinstance(first, dict) else None
        return value if is_plain_int(value) else None
    found = _MAXMTU_TEXT.search(text)
    return int(found.group(1)) if found and len(found.group(1)) <= 9 else None


def mtu_problem(value: Any, max_mtu: Optional[int] = None) -> Optional[str]:
    mtu = as_int(value)
    if mtu is None:
        return f"must be an integer, not {type(value).__name__}"
    if not MTU_MIN <= mtu <= MTU_MAX:
        return f"outside {MTU_MIN}..{MTU_MAX}"
    if max_mtu and mtu > max_mtu:
        return f"above this interface's maximum MTU {max_mtu}"
    return None


def matched_name_problems(root: str, match: Dict[str, Any]) -> List[Problem]:
    """The names the driver/PCI globs select on this host obey the same rule as names given one by one:
    the network role writes them into root's boot script and units."""
    try:
        selected, _missing = nics.select_nics(on_root(root, "/sys"), [], match)
    except OSError:
        return []  # no /sys/class/net: nothing is selected, the network role has no NIC to tune
    return [Problem("network_interface_match", match, f"selects interface {nic['name']!r}, which {problem}")
            for nic in selected for problem in [kernel_rules.interface_name_problem(nic["name"])] if problem]


def check_network(root: str, variables: Dict[str, Any], ip_details: IpDetails) -> List[Problem]:
    problems: List[Problem] = []
    mtu = variables.get("network_mtu")
    if mtu is not None and mtu_problem(mtu):
        problems.append(Problem("network_mtu", mtu, mtu_problem(mtu)))
        mtu = None  # still report missing interfaces, but no per-interface MTU verdicts
    interfaces = variables.get("network_interfaces")
    if interfaces is None:
        interfaces = []
    if not isinstance(interfaces, list):
        problems.append(Problem("network_interfaces", interfaces, "must be a list of interface names"))
        interfaces = []
    for name in interfaces:
        label = "network_interfaces"
        name_problem = kernel_rules.interface_name_problem(name)
        if name_problem:
            problems.append(Problem(label, name, name_problem))
            continue
        if not os.path.isdir(on_root(root, f"/sys/class/net/{name}")):
            problems.append(Problem(label, name, "no such interface on this host (/sys/class/net)"))
            continue
        if mtu is None:
            continue
        details = ip_details(name)
        reason = mtu_problem(mtu, max_mtu_from_ip(details) if details else None)
        if reason:
            problems.append(Problem("network_mtu", mtu, f"{reason} ({name})"))
    match = variables.get("network_interface_match")
    if match is not None and (not isinstance(match, dict) or set(match) - {"driver", "pci"}):
        problems.append(Problem("network_interface_match", match, "must be a mapping with only 'driver' and/or 'pci'"))
    elif match:
        problems.extend(matched_name_problems(root, match))
    for variable in ("network_ring", "network_channels"):
        value = variables.get(variable)
        if value is None:
            continue
        if not isinstance(value, dict):
            problems.append(Problem(variable, value, "must be a mapping (e.g. {rx: 8192, tx: 8192})"))
            continue
        for key, count in value.items():
            if as_int(count) is None or as_int(count) <= 0:
                problems.append(Problem(f"{variable}[{key!r}]", count, "must be a positive integer"))
    return problems


# ---------------------------------------------------------------- storage

def matched_block_devices(root: str, patterns: List[str]) -> List[str]:
    try:
        devices = sorted(os.listdir(on_root(root, "/sys/block")))
    except OSError:
        return []
    return [d for d in devices if any(fnmatch.fnmatchcase(d, p) for p in patterns)]


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _usable(root: str, names: List[str]) -> List[str]:
    """The names the storage role would tune (block_devices.skip_reason: no partitions, no
    empty loop devices, ...)."""
    return [n for n in names if skip_reason(on_root(root, f"/sys/block/{n}")) is None]


def device_pattern_problems(root: str, patterns: List[str], allow_no_match: bool) -> List[Problem]:
    """A name without * ? [ is a device that must be here; a glob must match one unless allowed."""
    problems: List[Problem] = []
    for pattern in patterns:
        matched = matched_block_devices(root, [pattern])
        usable = _usable(root, matched)
        if usable:
            continue
        if not is_glob(pattern):
            why = (f"{pattern} cannot be tuned: {skip_reason(on_root(root, f'/sys/block/{pattern}'))}" if matched
                   else "no such block device on this host (/sys/block)")
            problems.append(Problem("storage_device_patterns", pattern, why))
        elif not allow_no_match:
            present = _usable(root, matched_block_devices(root, ["*"]))
            problems.append(Problem("storage_device_patterns", pattern,
                                    f"matches no block device on this host (it has: {', '.join(present) or 'none'}); "
                                    "set storage_allow_no_match: true where that is expected, "
                                    "or storage_enabled: false"))
    return problems


def check_storage(root: str, variables: Dict[str, Any]) -> List[Problem]:
    problems: List[Problem] = []
    patterns = variables.get("storage_device_patterns")
    if patterns is None:
        patterns = []
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        return [Problem("storage_device_patterns", patterns, "must be a list of glob patterns such as 'nvme*n*'")]
    bad = [p for p in patterns if any(c in p for c in '/" \t\n')]
    if bad:
        return [Problem("storage_device_patterns", bad, "are not device-name globs (no '/', quotes or spaces)")]
    allow_no_match = as_bool(variables.get("storage_allow_no_match", False))
    if allow_no_match is None:
        problems.append(Problem("storage_allow_no_match", variables["storage_allow_no_match"],
                                "must be true or false"))
        allow_no_match = True  # judged above; no second verdict on the patterns
    problems.extend(device_pattern_problems(root, patterns, allow_no_match))
    read_ahead = variables.get("storage_read_ahead_kb")
    if read_ahead is not None and (as_int(read_ahead) is None or as_int(read_ahead) < 0):
        problems.append(Problem("storage_read_ahead_kb", read_ahead, "must be a non-negative integer (KiB)"))
    scheduler = variables.get("storage_scheduler")
    if scheduler is None or scheduler == "":
        return problems
    if not isinstance(scheduler, str):
        return problems + [Problem("storage_scheduler", scheduler, "must be a scheduler name such as 'none'")]
    for device in matched_block_devices(root, patterns):
        offered = _read(root, f"/sys/block/{device}/queue/scheduler")
        if offered is not None and scheduler not in choices(offered):
            problems.append(Problem("storage_scheduler", scheduler,
                                    f"/dev/{device} does not offer it (offers: {', '.join(choices(offered))})"))
    return problems


# ---------------------------------------------------------------- memory

def check_memory(root: str, variables: Dict[str, Any]) -> List[Problem]:
    problems: List[Problem] = []
    for variable, directory in HUGEPAGE_DIRS.items():
        count = variables.get(variable)
        if count is None:
            continue
        if as_int(count) is None or as_int(count) < 0:
            problems.append(Problem(variable, count, "must be a non-negative integer (pages)"))
        elif as_int(count) > 0 and not os.path.isdir(on_root(root, f"/sys/kernel/mm/hugepages/{directory}")):
            problems.append(Problem(variable, count, f"this host's kernel/CPU has no {directory} huge pages"))
    exact = variables.get("memory_hugepages_exact")
    if exact is not None and as_bool(exact) is None:
        problems.append(Problem("memory_hugepages_exact", exact, "must be true or false"))
    per_node = variables.get("memory_hugepages_2m_per_node")
    if per_node is not None and not isinstance(per_node, dict):
        problems.append(Problem("memory_hugepages_2m_per_node", per_node, "must be a mapping of NUMA node to pages"))
        per_node = {}
    for node, count in (per_node or {}).items():
        label = f"memory_hugepages_2m_per_node[{node!r}]"
        number = str(node)[4:] if str(node).startswith("node") else str(node)
        if isinstance(node, bool) or kernel_rules.kernel_int(number) is None or number.startswith("-"):
            problems.append(Problem(label, count, "NUMA node must be a number such as 0 (or 'node0')"))
        elif as_int(count) is None or as_int(count) < 0:
            problems.append(Problem(label, count, "must be a non-negative integer (pages)"))
        elif not os.path.isdir(on_root(root, f"/sys/devices/system/node/node{number}/hugepages/hugepages-2048kB")):
            problems.append(Problem(label, count, f"this host has no NUMA node {number} with 2 MiB huge pages"))
    for variable, name in (("memory_thp_enabled", "enabled"), ("memory_thp_defrag", "defrag")):
        wanted = variables.get(variable)
        if wanted is None or wanted == "":
            continue
        offered = _read(root, f"/sys/kernel/mm/transparent_hugepage/{name}")
        reason = _bool_problem(variable, wanted)
        if reason:
            problems.append(reason)
        elif offered is None:
            problems.append(Problem(variable, wanted, "this host's kernel has no transparent huge pages"))
        elif wanted not in choices(offered):
            problems.append(Problem(variable, wanted, f"not offered here (offers: {', '.join(choices(offered))})"))
    return problems


# ---------------------------------------------------------------- cpu, gpu, limits, reboot

def check_cpu(root: str, variables: Dict[str, Any]) -> List[Problem]:
    governor = variables.get("cpu_governor")
    if governor is None or governor == "":
        return []
    if not isinstance(governor, str):
        return [Problem("cpu_governor", governor, "must be a governor name such as 'performance'")]
    offered_files = sorted(glob.glob(on_root(root, GOVERNORS)))
    for offered_file in offered_files:  # none at all: no cpufreq (a VM), the cpu role skips
        offered = (_read("/", offered_file) or "").split()  # the glob is already under root; odd bytes read as U+FFFD
        if governor not in offered:
            cpu = offered_file.split("/cpufreq/")[0].rsplit("/", 1)[-1]
            return [Problem("cpu_governor", governor, f"{cpu} does not offer it (offers: {', '.join(offered)})")]
    return []


def nvidia_driver_loaded(root: str) -> bool:
    return os.path.exists(on_root(root, "/proc/driver/nvidia/version")) or os.path.isdir(
        on_root(root, "/sys/module/nvidia"))


def check_gpu(root: str, variables: Dict[str, Any]) -> List[Problem]:
    problems: List[Problem] = []
    for variable in ("gpu_persistence_mode", "gpu_nvidia_peermem", "gpu_rdma_expected", "preflight_require_gpu_driver"):
        value = variables.get(variable)
        if value is not None and as_bool(value) is None:
            problems.append(Problem(variable, value, "must be true or false"))
    wants_driver = as_bool(variables.get("gpu_persistence_mode")) or as_bool(variables.get("gpu_nvidia_peermem"))
    required = as_bool(variables.get("preflight_require_gpu_driver"))
    if required and wants_driver and not nvidia_driver_loaded(root):
        problems.append(Problem("preflight_require_gpu_driver", True,
                                "no NVIDIA driver on this host (/proc/driver/nvidia/version absent) "
                                "while GPU tuning is required"))
    conf = variables.get("gpu_nccl_conf")
    if conf is not None and not isinstance(conf, dict):
        problems.append(Problem("gpu_nccl_conf", conf, "must be a mapping of NCCL_* name to value"))
        conf = {}
    for key, value in (conf or {}).items():
        label = f"gpu_nccl_conf[{key!r}]"
        if not isinstance(key, str) or not _NCCL_KEY.match(key):
            problems.append(Problem(label, value, "is not an environment variable name such as NCCL_DEBUG"))
            continue
        reason = _sysctl_value_problem(value)
        if reason:
            problems.append(Problem(label, value, reason))
    path = variables.get("gpu_nccl_conf_path")
    if path is not None and (not isinstance(path, str) or not path.startswith("/")):
        problems.append(Problem("gpu_nccl_conf_path", path, "must be an absolute path such as /etc/nccl.conf"))
    return problems


def check_limits(root: str, variables: Dict[str, Any]) -> List[Problem]:
    problems: List[Problem] = []
    nr_open_text = _read(root, "/proc/sys/fs/nr_open")
    nr_open = kernel_rules.kernel_int(nr_open_text)
    for variable in LIMIT_NAMES + ("limits_systemd_memlock", "limits_systemd_nofile"):
        value = variables.get(variable)
        if value is None:
            continue
        unlimited = ("infinity",) if variable.startswith("limits_systemd") else ("unlimited", "-1")
        if variable.endswith("nofile"):
            unlimited = ()  # the kernel caps open files at fs.nr_open: there is no "unlimited"
        if isinstance(value, bool):
            problems.append(_bool_problem(variable, value))
        elif isinstance(value, str) and value in unlimited:
            continue
        elif not is_plain_int(value) and not (isinstance(value, str) and value.isdigit()):
            words = "".join(f" or {u!r}" for u in unlimited)
            problems.append(Problem(variable, value, f"must be a positive integer{words}"))
        elif int(value) <= 0:
            problems.append(Problem(variable, value, "must be positive"))
        elif variable.endswith("nofile") and nr_open is not None and int(value) > nr_open:
            # Above fs.nr_open, PAM cannot set the limit and logins fail.
            problems.append(Problem(variable, value, f"above this host's fs.nr_open {nr_open}"))
    return problems


def check_reboot(variables: Dict[str, Any]) -> List[Problem]:
    policy = variables.get("tunefleet_reboot_policy")
    if policy is None or policy in REBOOT_POLICIES:
        return []
    return [Problem("tunefleet_reboot_policy", policy, f"must be one of {', '.join(REBOOT_POLICIES)}")]


# ---------------------------------------------------------------- variable names

# The prefixes of the roles' variables (docs/architecture.md): a name with one of them that no
# argument spec knows is a typo or a leftover, and would be silently ignored.
ROLE_PREFIXES = ("sysctl_", "network_", "storage_", "gpu_", "memory_", "limits_", "cpu_", "reboot_",
                 "preflight_", "verify_", "tunefleet_")
# Facts the roles set for each other while they run (the reboot role reads them).
# tunefleet_node: what this module read for the roles (node_reads.py), a fact once preflight ran.
ROLE_OUTPUTS = re.compile(r"^([a-z]+_reboot_(required|reason)|reboot_rebooted|tunefleet_node)$")


def check_variable_names(defined: List[str], known: List[str]) -> List[Problem]:
    """Every defined variable with a role prefix must be an option of some role's argument spec."""
    problems: List[Problem] = []
    known_set = set(known)
    for name in sorted(set(defined)):
        if not name.startswith(ROLE_PREFIXES) or name in known_set or ROLE_OUTPUTS.match(name):
            continue
        close = difflib.get_close_matches(name, sorted(known_set), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        problems.append(Problem(name, NO_VALUE, f"no tunefleet role has this variable, so it would be ignored{hint}"))
    return problems


# ---------------------------------------------------------------- all of it

ROLE_CHECKS = {
    "sysctl": lambda root, v, ip: check_sysctl(root, v),
    "network": check_network,
    "storage": lambda root, v, ip: check_storage(root, v),
    "memory": lambda root, v, ip: check_memory(root, v),
    "cpu": lambda root, v, ip: check_cpu(root, v),
    "gpu": lambda root, v, ip: check_gpu(root, v),
    "limits": lambda root, v, ip: check_limits(root, v),
}


def role_enabled(variables: Dict[str, Any], role: str) -> Optional[bool]:
    """`<role>_enabled` as the play reads it (default true); None when it is not a flag."""
    return as_bool(variables.get(f"{role}_enabled", True))


def preflight(root: str, variables: Dict[str, Any], roles: List[str], ip_details: IpDetails,
              defined_names: Optional[List[str]] = None, known_names: Optional[List[str]] = None) -> List[Problem]:
    """Every problem with the inputs of the roles that will run, for this host; and, when the
    known names are given, every role-prefixed variable no role knows (whatever roles run)."""
    problems = check_variable_names(defined_names or [], known_names) if known_names else []
    problems += check_reboot(variables)
    for role in roles:
        if role not in ROLE_CHECKS:
            continue
        enabled = role_enabled(variables, role)
        if enabled is None:
            problems.append(Problem(f"{role}_enabled", variables[f"{role}_enabled"], "must be true or false"))
            continue
        if enabled:
            problems.extend(ROLE_CHECKS[role](root, variables, ip_details))
    return problems
