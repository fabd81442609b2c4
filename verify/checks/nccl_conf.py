"""/etc/nccl.conf (gpu_nccl_conf_path) holds exactly the KEY=VALUE pairs of gpu_nccl_conf."""
from __future__ import annotations

from verify.checks.common import result, role_disabled, section, skip
from verify.facts import nccl_settings
from verify.facts.nccl_settings import NcclConfParseError  # noqa: F401 - raised by parse_nccl_conf
from verify.node import Node
from verify.result import Status

ROLE = "gpu"
CHECK_ID = "gpu.nccl_conf"


def parse_nccl_conf(text: str) -> dict:
    """NCCL reads `KEY=VALUE` lines; `#` starts a comment line (verify.facts.nccl_settings, the one reader)."""
    return {key: setting.value for key, setting in nccl_settings.parse_nccl_conf(text).items()}


def judge(path: str, wanted: dict, found: dict):
    expected = {k: str(v) for k, v in wanted.items()}
    wrong = [f"{k}={found.get(k)!r} (want {v!r})" for k, v in sorted(expected.items()) if found.get(k) != v]
    extra = sorted(set(found) - set(expected))
    if wrong:
        return result(CHECK_ID, ROLE, Status.FAIL, expected, found, f"{path}: " + "; ".join(wrong), "gpu_nccl_conf")
    if extra:
        return result(CHECK_ID, ROLE, Status.WARN, expected, found,
                      f"{path} also sets {', '.join(extra)}, which gpu_nccl_conf does not", "gpu_nccl_conf")
    return result(CHECK_ID, ROLE, Status.PASS, expected, found)


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, CHECK_ID)
    if disabled:
        return [disabled]
    gpu = section(spec, ROLE)
    wanted = gpu.get("nccl_conf") or {}
    path = gpu.get("nccl_conf_path") or "/etc/nccl.conf"
    if not wanted:
        return [skip(CHECK_ID, ROLE, "gpu_nccl_conf is empty: no file to check")]
    if not node.exists("/proc/driver/nvidia/version"):
        return [skip(CHECK_ID, ROLE, "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)", wanted)]
    text = node.read(path)
    if text is None:
        return [result(CHECK_ID, ROLE, Status.FAIL, wanted, None, f"{path} does not exist", "gpu_nccl_conf")]
    return [judge(path, wanted, parse_nccl_conf(text))]
