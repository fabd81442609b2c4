#!/usr/bin/env bash
# The PCIe path, ACS, IOMMU and NVSwitch fabric checks on a GPU machine, and the pcie role on it
# (issue 31). On the 1x H100 (a VM): the path is printed, ACS and IOMMU SKIP naming the hypervisor,
# the fabric SKIPs (no NVSwitch), and the role refuses before any change, naming pcie_force.
# Expects .whl/ (ansible-core and its pure-Python needs, collections.tar.gz) carried in.
#
#   bash tests/device/pcie_checks.sh      # writes $OUT/pcie_checks.tar.gz
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir pcie
verify=($py -m verify verify --local --no-bench --no-history --format json --quiet)
run_verify checks
$py - "$work/checks/report.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["results"]
except (OSError, ValueError, KeyError):
    sys.exit(0)  # no report: the checks below FAIL saying so
for row in rows:
    if row["check_id"].startswith(("pcie", "health.fabric", "health.gpu.fabric")):
        print(f'{row["status"]:5} {row["check_id"]}: {row.get("observed")} | {row.get("reason", "")[:200]}')
PY
check checks 'rows["pcie.acs"]["status"] == "SKIP" and "virtual" in rows["pcie.acs"]["reason"]' "ACS SKIP on a VM"
check checks 'not [k for k, r in rows.items() if k.startswith(("pcie", "health.fabric", "health.gpu.fabric")) and r["status"] in ("FAIL", "ERROR")]' \
  "no PCIe/fabric FAIL or ERROR on the healthy machine"

ansible_env || exit 3
before=$(sha256sum /var/lib/tunefleet/ledger.json 2>/dev/null || echo "no ledger")
rc=0
# On a VM the role refuses before any change (the play fails on purpose); the ledger check below judges.
python3 "$site/bin/ansible-playbook" -i inventory/local playbooks/site.yml --tags pcie -e pcie_enabled=true \
  >"$work/role.log" 2>&1 || rc=$?
note "== pcie role with pcie_enabled=true: exit $rc"
{ grep -E 'refused|pcie_force|PLAY RECAP|failed=' "$work/role.log" || true; } | head -6 | tee -a "$summary"
after=$(sha256sum /var/lib/tunefleet/ledger.json 2>/dev/null || echo "no ledger")
if [ "$before" = "$after" ]; then note "CHECK PASS the ledger is unchanged"; else note "CHECK FAIL the ledger changed"; fi
pack pcie_checks
