#!/usr/bin/env bash
# nvidia-smi's own forms on a real GPU machine (issue 46 items 4, 6, 7): the healthy twin of every fault form.
# The machine's default table, -q, an unknown flag and an unknown field are captured and read by the readers
# (verify.facts.health_smi.read_any, smi_failure.classify); verify --local must give presence, clocks, fabric
# and dcgm without a FAIL or ERROR (dcgm SKIPs with its reason where DCGM or its watches are absent).
#
#   bash tests/device/smi_forms.sh      # writes $OUT/smi_forms.tar.gz
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir smi_forms
verify=($py -m verify verify --local --no-bench --no-history --format json --quiet)
run_verify checks
check checks 'rows["health.gpu.presence"]["status"] == "PASS"' "presence PASS on the healthy machine"
check checks 'not [k for k, r in rows.items() if k.startswith(("health.gpu", "health.fabric", "health.dcgm", "gpu.persistence")) and r["status"] in ("FAIL", "ERROR")]' \
  "no GPU, fabric or DCGM FAIL/ERROR on the healthy machine"
check checks 'all(r.get("details", {}).get("action") for r in rows.values() if r["status"] == "FAIL")' \
  "every FAIL carries an action class"

# The machine's own outputs, kept for fixtures (README: tests/fixtures/node/health/public), and read here.
nvidia-smi >"$out/nvidia-smi.table" 2>&1 || note "nvidia-smi (table) exit $?"
nvidia-smi -q >"$out/nvidia-smi-q" 2>&1 || note "nvidia-smi -q exit $?"
rc=0; nvidia-smi --no-such-flag >"$out/nvidia-smi-bad-flag" 2>&1 || rc=$?; echo "$rc" >"$out/nvidia-smi-bad-flag.rc"
rc=0; nvidia-smi --query-gpu=index,no.such.field --format=csv >"$out/nvidia-smi-bad-field" 2>&1 || rc=$?
echo "$rc" >"$out/nvidia-smi-bad-field.rc"
rc=0; dcgmi health -c >"$out/dcgmi-health-c" 2>&1 || rc=$?; echo "$rc" >"$out/dcgmi-health-c.rc"
$py - "$out" <<'PY' | tee -a "$summary"
import sys
from pathlib import Path
from verify.facts import dcgm_health, health_smi, smi_failure
out = Path(sys.argv[1])
gpus, why = health_smi.read_any((out / "nvidia-smi.table").read_text(), "nvidia-smi")
print(f"CHECK {'PASS' if gpus and not why and not any(g.errors() for g in gpus) else 'FAIL'} the real default table "
      f"reads: {[g.bus_id for g in gpus]} {why}")
gpus, why = health_smi.read_any((out / "nvidia-smi-q").read_text(), "nvidia-smi -q")
print(f"CHECK {'PASS' if gpus and not why else 'FAIL'} the real -q reads: {len(gpus)} GPU(s) {why}")
bad = (out / "nvidia-smi-bad-flag").read_text()
rc = int((out / "nvidia-smi-bad-flag.rc").read_text())
found = smi_failure.classify(bad, "", rc)
print(f"CHECK {'PASS' if found and all(f.action is None for f in found) else 'FAIL'} an unknown flag (exit {rc}) is "
      f"'could not check': {[f.said() for f in found]}")
text = (out / "dcgmi-health-c").read_text()
print(f"INFO dcgmi health -c exit {(out / 'dcgmi-health-c.rc').read_text().strip()}: "
      f"overall {dcgm_health.parse(text).overall!r}; first line {text.splitlines()[:1]}")
PY
pack smi_forms
