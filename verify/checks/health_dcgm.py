"""DCGM's background health watches (`dcgmi health -c`), judged where the node runs DCGM with its watches set;
SKIP with the reason otherwise (no GPU, no dcgmi, no host engine, no watches).

DCGM's own words (dcgm_structs.h dcgmHealthWatchResults_t): PASS "all results within this system are reporting
normal", WARN "a warning has been issued", FAIL "a failure has been issued". A Warning is watched; a Failure takes
the node out with the class of the system that failed (SYSTEM_CLASS): a link, the driver, the SMs or an NVSwitch
are reset or rebooted (DCGM's NVLink and XID messages: "reset the GPU"/"reboot"), a PCIe, thermal, power, infoROM
or ConnectX failure is hardware service (DCGM's PCIe message: "Reconnect PCIe card ... run the field
diagnostic"), memory is reset then RMA'd if it recurs. A report that cannot be read is ERROR.
"""
from __future__ import annotations

from verify.checks.common import error, result, skip
from verify.checks.health_common import ROLE
from verify.facts import dcgm_health
from verify.facts.pci import driver_reason, nvidia_gpus_on_bus
from verify.judging import verdicts
from verify.node import Node
from verify.result import Status

SYSTEM_CLASS = {
    "pcie system": verdicts.DRAIN_RMA,
    "memory system": verdicts.REBOOT,
    "inforom system": verdicts.DRAIN_RMA,
    "thermal system": verdicts.DRAIN_RMA,
    "power system": verdicts.DRAIN_RMA,
    "nvlink system": verdicts.REBOOT,
    "driver": verdicts.REBOOT,
    "sm system": verdicts.REBOOT,
    "nvswitch nf": verdicts.REBOOT,
    "nvswitch f": verdicts.REBOOT,
    "connectx system": verdicts.DRAIN_RMA,
}
WARNING_CLASS = verdicts.WATCH


def incident_class(incident: dcgm_health.Incident):
    """The class of one incident, or None where its health word is not DCGM's (unreadable)."""
    health = incident.health.strip().lower()
    if health == "failure":
        return SYSTEM_CLASS.get(incident.system.strip().lower(), verdicts.REBOOT)
    if health == "warning":
        return WARNING_CLASS
    if health == "healthy":
        return verdicts.OK
    return None


def judge(report: dcgm_health.HealthReport) -> list:
    check_id = "health.dcgm"
    overall = (report.overall or "").strip().lower()
    if overall not in dcgm_health.HEALTH_WORDS:
        said = f"overall health {report.overall[:40]!r}" if report.overall else "no 'Overall Health' line"
        return [error(check_id, ROLE, f"could not read dcgmi health -c: {said}", "Healthy")]
    if overall == "healthy" and not report.entities:
        return [result(check_id, ROLE, Status.PASS, "Healthy", "Healthy", details={verdicts.ACTION_KEY: verdicts.OK})]
    rows = []
    for entity in report.entities:
        row_id = f"{check_id}.{entity.name}"
        classes = [(incident_class(i), i) for i in entity.incidents]
        unreadable = [i for c, i in classes if c is None]
        if unreadable or not classes:
            what = f"health {unreadable[0].health[:30]!r} of {unreadable[0].system}" if unreadable else \
                "an entity with no incident"
            rows.append(error(row_id, ROLE, f"could not read dcgmi health -c: {what}", "Healthy"))
            continue
        action = verdicts.worst(c for c, _ in classes)
        said = "; ".join(f"{i.system} {i.health}: {i.message}".strip().rstrip(":") for _, i in classes)
        details = {verdicts.ACTION_KEY: action, "group": entity.group, "entity": entity.entity_id,
                   "incidents": [{"system": i.system, "health": i.health, "message": i.message} for _, i in classes]}
        rows.append(result(row_id, ROLE, verdicts.status_of(action), "Healthy", entity.health,
                           f"DCGM {entity.group} {entity.entity_id}: {said}"[:600], details=details,
                           fix=verdicts.remedy(action, entity.entity_id, f"{entity.group} {entity.entity_id}")))
    if overall != "healthy" and all(r.status is Status.PASS for r in rows):
        rows.append(error(check_id, ROLE, f"could not read dcgmi health -c: overall {report.overall} but no "
                                          "entity says why", "Healthy"))
    return rows


def run(spec: dict, node: Node) -> list:
    why = driver_reason(node)
    if why:
        return [skip("health.dcgm", ROLE, why)]
    if not nvidia_gpus_on_bus(node):
        return [skip("health.dcgm", ROLE, "no NVIDIA GPU on the PCI bus")]
    report, why = dcgm_health.read(node)
    if report is None:
        return [skip("health.dcgm", ROLE, why)]
    if why and report.overall is None:
        return [error("health.dcgm", ROLE, f"could not read dcgmi health -c: {why}")]
    return judge(report)
