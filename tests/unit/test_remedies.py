"""Every finding carries what removes it (verify.judging.remedies): the table covers every check id that can
FAIL or WARN, and each remedy is checked against the desired state it was judged against (issue 49, issue 48
item 4)."""
from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from verify import checks
from verify.bench import causes
from verify.judging import remedies, verdicts
from verify.result import CheckResult, Status

ROOT = Path(__file__).resolve().parents[2]
ID_PREFIXES = tuple(sorted({name.split(".")[0] for name in checks.REGISTRY} | {"limits", "conflicts"}))
ID_SHAPE = re.compile(rf"({'|'.join(ID_PREFIXES)})\.[a-z0-9_.]*[a-z0-9_]")


def _id_templates(path: Path) -> set:
    """Every check-id-shaped string a check module builds: literals, and f-strings with each placeholder
    replaced by a sample instance ("x0")."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) else "x0" for part in node.values)
        # Left out: "/etc/sysctl.d" (a path), "memory.thp_" (a prefix), and "network.{kind}" whose second part
        # is all placeholder (network.ring / network.channels: test_ring_and_channels_have_rows).
        if text and ID_SHAPE.fullmatch(text) and not text.endswith((".d", "_")) \
                and not re.fullmatch(r"network\.x0(\.x0)?", text):
            found.add(text)
    return found


def check_ids() -> set:
    """The ids a FAIL or WARN can carry: a bare role name ("memory") is only a disabled role's SKIP or a
    crashed check's ERROR."""
    ids = {name for name in checks.REGISTRY if "." in name}
    for module in sorted((ROOT / "verify" / "checks").glob("*.py")):
        ids |= _id_templates(module)
    return ids


def test_every_check_id_the_checks_can_build_has_a_row():
    ids = check_ids()
    assert len(ids) > 50, sorted(ids)  # the walk found the checks' ids, not nothing
    assert {"sysctl.x0", "limits.login.x0", "network.mtu.x0", "health.gpu.xid.x0", "conflicts.swap"} <= ids
    missing = sorted(i for i in ids if remedies.row_for(i) is None)
    assert missing == []


def test_ring_and_channels_have_rows():
    assert remedies.row_for("network.ring.ens1")[0].variables[0][0] == "network_ring"
    assert remedies.row_for("network.channels.ens1")[0].variables[0][0] == "network_channels"


def test_the_walk_would_catch_a_missing_row(monkeypatch):
    kept = tuple((p, r) for p, r in remedies._COMPILED if not p.pattern.startswith(r"cpu\."))
    monkeypatch.setattr(remedies, "_COMPILED", kept)
    assert "cpu.governor" in [i for i in check_ids() if remedies.row_for(i) is None]


def test_every_cause_class_the_cause_finder_sets_has_a_row():
    tree = ast.parse((ROOT / "verify" / "bench" / "causes.py").read_text())
    emitted = {node.values[i].value for node in ast.walk(tree) if isinstance(node, ast.Dict)
               for i, key in enumerate(node.keys) if isinstance(key, ast.Constant) and key.value == "class"}
    assert emitted >= {"gpu-busy", "nccl-setting", "slowdown", "pcie-link", "cpu-governor", "unexplained"}
    assert emitted | set(causes.CAUSE_CLASSES) <= set(remedies.CAUSES)


def _fail(check_id: str, role: str, **details) -> CheckResult:
    return CheckResult(check_id, role, Status.FAIL, "x", "y", "wrong", "", details)


def test_a_limit_the_desired_state_holds_is_fixed_by_applying_the_role_not_by_setting_it():
    # Issue 48: "set limits_memlock and re-run site.yml" where the default already has that value.
    spec = desired_state()
    row = _fail("limits.login.memlock", "limits")
    remedies.attach([row], spec)
    remedy = row.details["remedy"]
    assert remedy["kind"] == "role" and remedy["tags"] == ["limits"] and remedy["fixable"] is True
    assert remedy["variables"] == {"limits_memlock": spec["limits"]["memlock"]}
    assert row.remediation.startswith("apply role limits (playbooks/site.yml --tags limits")
    assert f"limits_memlock: {spec['limits']['memlock']}" in row.remediation


def test_a_sysctl_key_names_its_key_and_desired_value():
    spec = desired_state()
    key, value = next(iter(spec["sysctl"]["settings"].items()))
    row = _fail(f"sysctl.{key}", "sysctl")
    remedies.attach([row], spec)
    assert row.details["remedy"]["variables"] == {f"sysctl_settings['{key}']": value}


def test_a_disabled_role_or_a_value_the_desired_state_lacks_asks_for_the_inventory():
    spec = desired_state()
    spec["limits"]["enabled"] = False
    row = _fail("limits.login.memlock", "limits")
    remedies.attach([row], spec)
    assert row.details["remedy"]["kind"] == "variable" and row.details["remedy"]["sets"] == {"limits_enabled": True}
    assert row.details["remedy"]["fixable"] is False and row.remediation.startswith("set limits_enabled: true")
    spec = desired_state()
    del spec["sysctl"]["settings"]["net.core.rmem_max"]
    row = _fail("sysctl.net.core.rmem_max", "sysctl")
    remedies.attach([row], spec)
    assert row.details["remedy"]["kind"] == "variable" and "no value in the desired state" in row.remediation


def test_a_role_fix_that_needs_a_reboot_is_not_counted_fixable():
    row = _fail("pcie.iommu", "pcie")
    spec = desired_state()
    spec.setdefault("pcie", {}).update(enabled=True, iommu="pt")
    remedies.attach([row], spec)
    assert row.details["remedy"]["kind"] == "role" and row.details["remedy"]["fixable"] is False
    assert "reboot" in row.remediation


def test_path_mtu_is_the_node_s_own_only_for_the_local_route():
    local = CheckResult("network.path_mtu.10.0.0.2", "network", Status.FAIL, 9000, 1500,
                        "the local route to 10.0.0.2 has MTU 1500, below 9000")
    hop = CheckResult("network.path_mtu.10.0.0.2", "network", Status.FAIL, 9000, 1500,
                      "a hop on the path to 10.0.0.2 has MTU 1500 (Frag needed), below 9000")
    remedies.attach([local, hop], desired_state())
    assert local.details["remedy"]["kind"] == "role" and hop.details["remedy"]["kind"] == "action"
    assert "switch port" in hop.details["remedy"]["command"]


def test_a_health_finding_keeps_its_class_and_its_own_command():
    row = CheckResult("health.gpu.xid.0000:3b:00.0", "health", Status.FAIL, None, None, "Xid 79",
                      verdicts.WORDS[verdicts.REBOOT], {verdicts.ACTION_KEY: verdicts.REBOOT})
    remedies.attach([row], desired_state())
    assert row.details["remedy"] == {"kind": "action", "action": "reboot", "command": verdicts.WORDS["reboot"],
                                     "fixable": False}
    assert row.remediation == verdicts.WORDS[verdicts.REBOOT]  # the check's words stay for an action


def _slow_allreduce(origin: str, key: str = "NCCL_P2P_DISABLE") -> CheckResult:
    return _fail("bench.nccl_allreduce", "bench", cause={"class": "nccl-setting", "key": key, "origin": origin,
                                                         "what": f"{key}=1", "evidence": "x"},
                 action=verdicts.FIX_CONFIG)


def test_an_nccl_line_is_the_gpu_role_s_only_in_the_file_it_writes():
    spec = desired_state()
    spec["gpu"].update(nccl_conf_path="/etc/nccl.conf", nccl_conf={"NCCL_DEBUG": "WARN"})
    in_file, in_env, in_home = (_slow_allreduce("/etc/nccl.conf"), _slow_allreduce("the environment"),
                                _slow_allreduce("/root/.nccl.conf"))
    remedies.attach([in_file, in_env, in_home], spec)
    assert in_file.details["remedy"]["kind"] == "role" and in_file.details["remedy"]["role"] == "gpu"
    assert "/etc/nccl.conf is rewritten without NCCL_P2P_DISABLE" in in_file.remediation
    assert in_env.details["remedy"]["kind"] == "action" and "job's environment" in in_env.details["remedy"]["command"]
    assert "/root/.nccl.conf" in in_home.details["remedy"]["command"]
    asked = copy.deepcopy(spec)
    asked["gpu"]["nccl_conf"]["NCCL_P2P_DISABLE"] = "1"  # the inventory itself sets it: the role would keep it
    row = _slow_allreduce("/etc/nccl.conf")
    remedies.attach([row], asked)
    assert row.details["remedy"]["kind"] == "variable"


def test_the_cause_finder_names_the_class_and_origin(tmp_path):
    tree = FakeTree(tmp_path)
    tree.write("/etc/nccl.conf", "NCCL_DEBUG=WARN\nNCCL_P2P_DISABLE=1\n")
    row = CheckResult("bench.nccl_allreduce", "bench", Status.FAIL, 300, 20, "busbw low",
                      details={"transport": {"kinds": ["SHM"]}})
    causes.explain([row], tree.node(), environment={})
    assert row.details["cause"]["class"] == "nccl-setting" and row.details["cause"]["key"] == "NCCL_P2P_DISABLE"
    assert row.details["cause"]["origin"] == "/etc/nccl.conf"


def test_every_fail_of_a_broken_node_carries_a_remedy(tmp_path):
    spec = desired_state()
    results = checks.run_checks(spec, FakeTree(tmp_path).nic("ens1").node())
    remedies.attach(results, spec)
    findings = [r for r in results if r.status in (Status.FAIL, Status.WARN)]
    assert findings and all(remedies.remedy_of(r.to_dict()) for r in findings)
    assert all(r.details.get("remedy") is None for r in results if r.status not in (Status.FAIL, Status.WARN))


SPEC_FORMS = st.one_of(st.none(), st.just({}), st.builds(desired_state),
                       st.dictionaries(st.sampled_from(["sysctl", "limits", "gpu", "network", "pcie"]),
                                       st.one_of(st.none(), st.integers(), st.text(max_size=3),
                                                 st.dictionaries(st.text(max_size=8), st.integers(), max_size=3))))


@settings(max_examples=200, deadline=None)
@given(check_id=st.one_of(st.sampled_from(sorted(check_ids())), st.text(max_size=30)),
       status=st.sampled_from(list(Status)), spec=SPEC_FORMS,
       details=st.dictionaries(st.sampled_from(["cause", "action", "x"]),
                               st.one_of(st.none(), st.text(max_size=5), st.fixed_dictionaries(
                                   {"class": st.sampled_from(sorted(remedies.CAUSES) + ["?"]),
                                    "origin": st.text(max_size=10), "key": st.text(max_size=10)}))))
def test_any_finding_and_any_desired_state_give_a_remedy_or_none_never_a_crash(check_id, status, spec, details):
    role = "bench" if check_id.startswith("bench") else check_id.split(".")[0]
    row = CheckResult(check_id, role, status, details=details)
    remedies.attach([row], spec)
    remedy = row.details.get("remedy")
    if status not in (Status.FAIL, Status.WARN):
        assert remedy is None
    elif remedy is not None:
        assert remedy["kind"] in remedies.KINDS and remedy["action"] in verdicts.ACTIONS
        assert isinstance(remedies.words(remedy), str)


def test_the_run_s_closing_lines_name_the_roles_and_what_no_role_fixes(tmp_path):
    spec = desired_state()
    results = checks.run_checks(spec, FakeTree(tmp_path).nic("ens1", mtu=1500).node(), names=["network.mtu", "limits"])
    results.append(CheckResult("health.gpu.presence", "health", Status.FAIL, 8, 7, "a GPU is lost",
                               details={verdicts.ACTION_KEY: verdicts.DRAIN_RMA}))
    remedies.attach(results, spec)
    lines = remedies.summary_lines(results)
    fixed = sum(1 for r in results if r.status is Status.FAIL) - 1
    assert lines == [f"fix: {fixed} finding(s) go when roles limits, network are applied (playbooks/site.yml --tags "
                     "limits,network, or `tunefleet fix REPORT_DIR`)",
                     "fix: 1 finding(s) need an inventory change or an action (their Fix line)"]
    assert remedies.summary_lines([r for r in results if r.status is Status.PASS]) == []
