#!/usr/bin/env bash
# The verify play's controller cost, unsliced and sliced (issue 52), on the device machine's idle cores: the
# CI VM has 2 cores shared by everyone, so its wall times say little about N slices on N cores.
# benchmarks/fleet_controller_cost.py runs playbooks/verify.yml over N local-connection hosts (each reads its
# own copy of a recorded node tree; no GPU is touched), as 1, 2 and SLICES ansible-playbook processes at once,
# each slice joined into one run directory and one fleet report; then the fleet report's phases at 100,000
# simulated hosts, joined from 16 slices (benchmarks/fleet_report_scale.py).
#
#   SIZES=1,10,100 bash tests/device/sliced_fleet_cost.sh      # repo root, as root; .whl/ carried (ansible-core)
#   SIZES=1000 SLICES=16 REPORT=0 bash tests/device/sliced_fleet_cost.sh   # a second call: one size, 16 slices
#
# Read: each size's rows (slices 1, 2, 16): "ctrl CPU s" per host about equal across the slice counts, the
# strategy's "(main max)" divided by the slices, "wall s" falling with the slices up to the cores; then the
# model lines for 10,000 and 100,000 hosts on a 32-core controller (CHECK lines say whether 10,000 hosts fit 15
# minutes). Every figure is in $OUT (sliced_cost.json, summary.txt).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir sliced-fleet-cost
ansible_env || exit 3
sizes=${SIZES:-1,10,100}
slices=${SLICES:-1,2,auto}
note "== $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); sizes $sizes, slices $slices"
rc=0
$py benchmarks/fleet_controller_cost.py --sizes "$sizes" --slices "$slices" --cores 32 --estimate-forks 1024 \
  --json-out "$out/sliced_cost.json" >"$work/cost.log" 2>&1 || rc=$?
note "== fleet_controller_cost.py: exit $rc"
tee -a "$summary" <"$work/cost.log"
minutes=$(sed -n 's/^10000 hosts sliced, config checks + .* about \([0-9.]*\) min.*/\1/p' "$work/cost.log" | head -1)
if [ -n "$minutes" ] && awk -v m="$minutes" 'BEGIN{exit !(m <= 15)}'; then
  note "CHECK PASS 10,000 hosts on a 32-core controller, sliced: about $minutes min (target 15)"
else
  note "CHECK FAIL 10,000 hosts on a 32-core controller, sliced: '${minutes:-no estimate}' min (target 15)"
fi
if [ "${REPORT:-1}" = 1 ]; then
  rc=0
  $py benchmarks/fleet_report_scale.py --hosts 100000 --slices 16 >"$work/report.log" 2>&1 || rc=$?
  note "== fleet_report_scale.py --hosts 100000 --slices 16: exit $rc (1: over its 10,000-host limits, expected)"
  tee -a "$summary" <"$work/report.log"
fi
cp "$summary" "$out/summary.txt"
