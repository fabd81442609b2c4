"""What removes a finding: one table from check ids and benchmark cause classes to the remedy (issue 49).

A finding that a role owns names the role, the tag site.yml runs it under, and the variables that set the
value with the value the desired state holds for them: applying the role removes it (`tunefleet fix`
plans from exactly this). A finding no role owns names its command or action (reset the GPU, reboot, RMA
with the evidence, install a package), with the action class of verify.judging.verdicts.

Kinds of remedy (`details["remedy"]["kind"]`):
- `role`: the desired state already holds the value; apply the role (site.yml --tags ROLE) and verify again.
- `variable`: the desired state does not hold a value that removes it (the role is off, or the variable is
  not set): set the variable in the inventory to the value named, then apply the role. `tunefleet fix`
  never guesses an inventory change: it lists these apart.
- `action`: no role owns it: the command or action named, by its action class.

The remedy is checked against the desired state the finding was judged against (`attach`): a role remedy
whose role is disabled or whose variable the desired state lacks becomes `variable`, so a hint never says
"apply the role" where applying it would change nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from verify.judging import verdicts
from verify.result import CheckResult, Status

ROLE = "role"
VARIABLE = "variable"
ACTION = "action"
KINDS = (ROLE, VARIABLE, ACTION)
REMEDY_KEY = "remedy"
SITE = "playbooks/site.yml"
# A value the finding's instance fills in (the sysctl key, the device, the limits item).
_INSTANCE = "{instance}"


@dataclass(frozen=True)
class Remedy:
    """One row: `kind` and, for a role, the role (its site.yml tag is its name) and the variables as
    (name shown, path of its value in the desired state document); for an action, its class and command
    (None: the class the finding itself carries, verdicts.ACTION_KEY). `sets` names values an inventory must
    set (kind variable), `then` what must follow the apply before the finding can PASS (a reboot)."""

    kind: str
    role: str = ""
    variables: tuple = ()
    action: Optional[str] = verdicts.FIX_CONFIG
    command: str = ""
    sets: dict = field(default_factory=dict)
    then: str = ""


def _role(role: str, *variables: tuple, then: str = "") -> Remedy:
    return Remedy(ROLE, role=role, variables=variables, then=then)


def _act(action: Optional[str], command: str = "") -> Remedy:
    return Remedy(ACTION, action=action, command=command)


def _set(role: str, sets: dict, command: str = "") -> Remedy:
    return Remedy(VARIABLE, role=role, sets=sets, command=command)


# check id (regex, full match; `instance` is the part a variable names) -> remedy. First match wins.
# Variables: (name as an inventory writes it, path of the desired state's value; `{instance}` filled in).
CHECKS = (
    (r"sysctl\.(?P<instance>.+)", _role("sysctl", ("sysctl_settings['{instance}']", ("sysctl", "settings",
                                                                                      _INSTANCE)))),
    (r"network\.mtu(\.(?P<instance>.+))?", _role("network", ("network_mtu", ("network", "mtu")))),
    # The local route's MTU is this node's (the network role sets it); a hop's is a switch port's.
    (r"network\.path_mtu\..+#the local route.*", _role("network", ("network_mtu", ("network", "mtu")))),
    (r"network\.path_mtu(\..+)?", _act(verdicts.FIX_CONFIG, "set every switch port on the path to this node's "
                                       "MTU (network_mtu); no tunefleet role configures a switch")),
    (r"network\.irq_affinity(\..+)?", _role("network", ("network_irq_affinity", ("network", "irq_affinity")))),
    (r"network\.irqbalance", _role("network", ("network_irqbalance_mode", ("network", "irqbalance_mode")))),
    (r"network\.ring(\..+)?", _role("network", ("network_ring", ("network", "ring")))),
    (r"network\.channels(\..+)?", _role("network", ("network_channels", ("network", "channels")))),
    (r"storage\.scheduler(\..+)?", _role("storage", ("storage_scheduler", ("storage", "scheduler")))),
    (r"storage\.read_ahead_kb(\..+)?", _role("storage", ("storage_read_ahead_kb", ("storage", "read_ahead_kb")))),
    (r"gpu\.persistence_mode(\..+)?", _role("gpu", ("gpu_persistence_mode", ("gpu", "persistence_mode")))),
    (r"gpu\.nvidia_peermem", _role("gpu", ("gpu_nvidia_peermem", ("gpu", "nvidia_peermem")))),
    (r"gpu\.nccl_conf", _role("gpu", ("gpu_nccl_conf", ("gpu", "nccl_conf")))),
    (r"gpu\.nccl_version_alignment", _act(verdicts.FIX_CONFIG, "install matching nvidia-nccl-cu* and libnccl "
                                          "packages (no tunefleet role installs NCCL)")),
    (r"gpu\.cuda_driver_alignment", _act(verdicts.FIX_CONFIG, "install a driver at least as new as the CUDA "
                                         "runtime needs (no tunefleet role installs the driver)")),
    (r"gpu\.versions(\..+)?", _act(verdicts.FIX_CONFIG, "align the driver and library versions by package")),
    (r"memory\.hugepages_2m\.node(?P<instance>\w*)", _role("memory", (
        "memory_hugepages_2m_per_node[{instance}]", ("memory", "hugepages_2m_per_node", _INSTANCE)))),
    (r"memory\.hugepages_2m", _role("memory", ("memory_hugepages_2m", ("memory", "hugepages_2m")))),
    (r"memory\.hugepages_1g", _role("memory", ("memory_hugepages_1g", ("memory", "hugepages_1g")),
                                    then="reboot (1 GiB pages are reserved at boot)")),
    (r"memory\.thp_(?P<instance>\w+)", _role("memory", ("memory_thp_{instance}", ("memory", "thp_{instance}")))),
    (r"limits\.login\.(?P<instance>\w+)", _role("limits", ("limits_{instance}", ("limits", _INSTANCE)))),
    (r"limits\.(?P<instance>systemd_\w+)", _role("limits", ("limits_{instance}", ("limits", _INSTANCE)))),
    (r"limits\.(?P<instance>\w+)", _role("limits", ("limits_{instance}", ("limits", _INSTANCE)))),
    (r"cpu\.governor", _role("cpu", ("cpu_governor", ("cpu", "governor")))),
    (r"pcie\.acs(\..+)?", _role("pcie", ("pcie_acs_disable", ("pcie", "acs_disable")))),
    (r"pcie\.iommu", _role("pcie", ("pcie_iommu", ("pcie", "iommu")),
                           then="reboot (the kernel command line takes effect at boot)")),
    (r"pcie\.path(\..+)?", _act(verdicts.WATCH, "compare the GPU's PCIe path with the vendor's topology")),
    # The conflicts: values the desired state does not hold; the inventory must set them.
    (r"conflicts\.rp_filter", _set("sysctl", {"sysctl_extra_settings": {"net.ipv4.conf.all.rp_filter": 2}})),
    (r"conflicts\.arp_flux", _set("sysctl", {"sysctl_extra_settings": {"net.ipv4.conf.all.arp_ignore": 1,
                                                                        "net.ipv4.conf.all.arp_announce": 2}})),
    (r"conflicts\.ip_forward", _set("sysctl", {"sysctl_extra_settings": {"net.ipv4.ip_forward": 1}},
                                    "and remove the 0 from the sysctl file the finding names")),
    (r"conflicts\.ptrace_scope", _set("sysctl", {"sysctl_extra_settings": {"kernel.yama.ptrace_scope": 1}})),
    (r"conflicts\.swap", _act(verdicts.FIX_CONFIG, "swapoff -a and remove the swap entries from /etc/fstab "
                              "(no tunefleet role manages swap)")),
    (r"conflicts\.nccl_debug_env", _act(verdicts.FIX_CONFIG, "remove the NCCL_DEBUG settings from the files "
                                        "named, or set them in gpu_nccl_conf if intended")),
    (r"conflicts(\..+)?", _act(verdicts.FIX_CONFIG, "resolve the conflicting setting the finding names")),
    # Health: hardware and the driver. The finding carries its class (None); the command is its own words.
    (r"health\.fabric\.manager", _act(verdicts.FIX_CONFIG, "start the NVIDIA fabric manager (systemctl start "
                                      "nvidia-fabricmanager); no tunefleet role installs it")),
    (r"health\.topology(\..+)?", _act(verdicts.FIX_CONFIG, "bind each GPU to its nearest HCA (NCCL_IB_HCA, "
                                      "NCCL_NET_GDR_LEVEL) or move the cards: the slots are hardware")),
    (r"health\.gpu\.presence", _act(verdicts.DRAIN_RMA)),
    (r"health\.gpu\.memory(\..+)?", _act(verdicts.RESET_GPU)),
    (r"health\.gpu\.clocks(\..+)?", _act(verdicts.DRAIN_RMA)),
    (r"health\.gpu\.fabric(\..+)?", _act(verdicts.REBOOT)),
    (r"health\.nvlink(\..+)?", _act(verdicts.REBOOT)),
    (r"health\.ib(\..+)?", _act(verdicts.DRAIN_RMA)),
    (r"health\.pcie(\..+)?", _act(verdicts.DRAIN_RMA)),
    (r"health\.(.+)", _act(None)),
    # Controller-side findings: the history's and the fleet's verdicts.
    (r"history\.drift\..+", _act(verdicts.FIX_CONFIG, "if the change was not intended, apply the roles again "
                                 "(playbooks/site.yml) and verify")),
    (r"history\..+", _act(verdicts.WATCH)),
    (r"fleet\..+", _act(None)),
    (r"pairs?\..+", _act(None)),
)

# A benchmark row's cause class (details["cause"]["class"], verify.bench.causes) -> remedy.
# The NCCL setting's remedy depends on where the line is (see bench_remedy); the others are fixed here.
CAUSES = {
    "gpu-busy": _act(verdicts.APPLICATION),
    "nccl-setting": _role("gpu", ("gpu_nccl_conf", ("gpu", "nccl_conf"))),
    "nccl-setting-elsewhere": _act(verdicts.FIX_CONFIG),
    "slowdown": _act(verdicts.DRAIN_RMA),
    "pcie-link": _act(verdicts.DRAIN_RMA),
    "cpu-governor": _role("cpu", ("cpu_governor", ("cpu", "governor"))),
    # Sockets where RDMA is expected: no one variable removes it (the gpu.nvidia_peermem finding, if any, is the
    # role's own row); the HCAs NCCL may use depend on the node's cabling.
    "nccl-socket-not-rdma": _act(verdicts.FIX_CONFIG, "load nvidia_peermem or use DMA-BUF (role gpu, "
                                 "gpu_nvidia_peermem), name the HCAs NCCL may use (NCCL_IB_HCA; on RoCE "
                                 "NCCL_IB_GID_INDEX) in gpu_nccl_conf, then verify again"),
    "unexplained": _act(None),
}
# A benchmark row with no cause class (an older report, an ERROR): its action class alone.
BENCH_DEFAULT = _act(None)

_COMPILED = tuple((re.compile(pattern), remedy) for pattern, remedy in CHECKS)


def row_for(check_id: str, reason: str = "") -> Optional[tuple]:
    """(remedy, instance) of the first CHECKS row matching `check_id` (a row with `#` also matches the
    finding's reason after it), else None."""
    for pattern, remedy in _COMPILED:
        match = pattern.fullmatch(f"{check_id}#{reason}") if "#" in pattern.pattern else pattern.fullmatch(check_id)
        if match:
            return remedy, (match.groupdict().get("instance") or "")
    return None


def _lookup(document: Any, path: tuple) -> tuple:
    """(True, value) at `path` in the desired state, else (False, None)."""
    for key in path:
        if not isinstance(document, dict) or key not in document:
            return False, None
        document = document[key]
    return True, document


def _fill(text: str, instance: str) -> str:
    return text.replace(_INSTANCE, instance)


def _role_enabled(spec: dict, role: str) -> bool:
    return (spec.get(role) or {}).get("enabled", True) is not False if isinstance(spec.get(role), dict) else False


def resolve(result: CheckResult, spec: Optional[dict]) -> Optional[dict]:
    """The remedy of one FAIL or WARN as data (None for other statuses), checked against `spec`."""
    if result.status not in (Status.FAIL, Status.WARN):
        return None
    details = result.details if isinstance(result.details, dict) else {}
    if result.role == "bench" or result.check_id.startswith("bench."):
        remedy, instance, extra = bench_remedy(details, spec or {})
    else:
        found = row_for(result.check_id, result.reason)
        if found is None:
            return None
        (remedy, instance), extra = found, {}
    return _as_data(remedy, instance, result, details, spec or {}, extra)


def bench_remedy(details: dict, spec: dict) -> tuple:
    """(remedy, instance, extra) of a benchmark row from its cause class. An NCCL line the gpu role writes
    (the desired state's gpu_nccl_conf_path, with gpu_nccl_conf set: the role owns the whole file) is the
    role's; the same line elsewhere (the job's environment, ~/.nccl.conf, NCCL_CONF_FILE) is removed there."""
    cause = details.get("cause") if isinstance(details.get("cause"), dict) else {}
    kind = cause.get("class")
    if kind == "nccl-setting":
        origin, key = str(cause.get("origin") or ""), str(cause.get("key") or "")
        gpu = spec.get("gpu") if isinstance(spec.get("gpu"), dict) else {}
        desired = gpu.get("nccl_conf") if isinstance(gpu.get("nccl_conf"), dict) else {}
        if origin and origin == gpu.get("nccl_conf_path") and key in desired:  # the inventory asks for it
            return _set("gpu", {f"gpu_nccl_conf['{key}']": "removed"}), "", {"setting": key, "file": origin}
        if origin and origin == gpu.get("nccl_conf_path"):
            return CAUSES["nccl-setting"], "", {"setting": key, "file": origin}
        where = "the job's environment" if origin == "the environment" else origin or "where it is set"
        return (_act(verdicts.FIX_CONFIG, f"remove {key} from {where} (no tunefleet role writes it)"), "",
                {"setting": key, "file": origin})
    return CAUSES.get(kind, BENCH_DEFAULT), "", {}


def _as_data(remedy: Remedy, instance: str, result: CheckResult, details: dict, spec: dict, extra: dict) -> dict:
    if remedy.kind == ACTION:
        action = remedy.action or verdicts.action_of(details) or verdicts.WATCH
        return dict(extra, kind=ACTION, action=action, command=remedy.command or result.remediation
                    or verdicts.WORDS[action].format(index="N", what=result.check_id), fixable=False)
    if remedy.kind == VARIABLE:
        return dict(extra, kind=VARIABLE, action=verdicts.FIX_CONFIG, role=remedy.role, tags=[remedy.role],
                    sets=dict(remedy.sets), command=remedy.command, fixable=False)
    variables, missing = {}, []
    for name, path in remedy.variables:
        shown = _fill(name, instance)
        present, value = _lookup(spec, tuple(_fill(part, instance) for part in path))
        if present and value not in (None, "", {}, []):
            variables[shown] = value
        else:
            missing.append(shown)
    if not _role_enabled(spec, remedy.role):
        return dict(extra, kind=VARIABLE, action=verdicts.FIX_CONFIG, role=remedy.role, tags=[remedy.role],
                    sets={f"{remedy.role}_enabled": True}, command="", fixable=False,
                    why=f"the {remedy.role} role is disabled in the desired state")
    if missing:
        return dict(extra, kind=VARIABLE, action=verdicts.FIX_CONFIG, role=remedy.role, tags=[remedy.role],
                    sets={name: None for name in missing}, command="", fixable=False,
                    why=f"the desired state holds no value for {', '.join(missing)}")
    data = dict(extra, kind=ROLE, action=verdicts.FIX_CONFIG, role=remedy.role, tags=[remedy.role],
                variables=variables, command=f"ansible-playbook -i INVENTORY {SITE} --tags {remedy.role} "
                "--limit HOST", fixable=not remedy.then)
    if remedy.then:
        data["then"] = remedy.then
    return data


def words(remedy: dict) -> str:
    """The remediation line a person reads: the action that removes the finding."""
    kind = remedy.get("kind")
    if kind == ROLE:
        values = "; ".join(f"{name}: {_short(value)}" for name, value in (remedy.get("variables") or {}).items())
        line = (f"apply role {remedy['role']} ({SITE} --tags {remedy['role']}, or `tunefleet fix RUN_DIR`), which "
                f"sets {values or 'the value'}")
        if remedy.get("setting"):
            line = f"{line}: {remedy['file']} is rewritten without {remedy['setting']}"
        return f"{line}; then {remedy['then']}" if remedy.get("then") else line
    if kind == VARIABLE:
        sets = "; ".join(f"{name}: {_short(value)}" if value is not None else f"{name} (no value in the desired "
                         "state)" for name, value in (remedy.get("sets") or {}).items())
        line = f"set {sets} in the inventory, then apply role {remedy['role']} ({SITE} --tags {remedy['role']})"
        return f"{line} {remedy['command']}" if remedy.get("command") else line
    return f"[{remedy.get('action')}] {remedy.get('command', '')}".strip()


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else _json(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def attach(results: list, spec: Optional[dict]) -> None:
    """Every FAIL and WARN gets `details["remedy"]` (in place); a role or variable remedy also rewrites the
    remediation line to name the action that removes it (a check's own words stay for actions)."""
    for result in results:
        remedy = resolve(result, spec)
        if remedy is None:
            continue
        if not isinstance(result.details, dict):
            result.details = {}
        result.details[REMEDY_KEY] = remedy
        if remedy["kind"] in (ROLE, VARIABLE) and not (remedy["kind"] == VARIABLE and result.remediation
                                                          and remedy.get("why") is None):
            result.remediation = words(remedy)


def remedy_of(result: dict) -> Optional[dict]:
    """The remedy a saved result (CheckResult.to_dict) carries, or None."""
    details = result.get("details") if isinstance(result, dict) else None
    remedy = details.get(REMEDY_KEY) if isinstance(details, dict) else None
    return remedy if isinstance(remedy, dict) and remedy.get("kind") in KINDS else None


def summary_lines(results: list) -> list:
    """One line for a person at the end of a run: the roles whose apply removes its findings, and how many
    findings no role removes ([] when there is no finding)."""
    found = [r for r in results if r.status in (Status.FAIL, Status.WARN)]
    remedies = [remedy_of(r.to_dict()) if isinstance(r, CheckResult) else remedy_of(r) for r in found]
    roles = sorted({m["role"] for m in remedies if m and m["kind"] == ROLE and m.get("fixable")})
    fixed = sum(1 for m in remedies if m and m["kind"] == ROLE and m.get("fixable"))
    lines = []
    if roles:
        lines.append(f"fix: {fixed} finding(s) go when roles {', '.join(roles)} are applied ({SITE} --tags "
                     f"{','.join(roles)}, or `tunefleet fix REPORT_DIR`)")
    if len(found) > fixed:
        lines.append(f"fix: {len(found) - fixed} finding(s) need an inventory change or an action (their Fix line)")
    return lines
