#!/usr/bin/env bash
# The fleet path on a GPU node whose torch lives in a venv (issue 40 item 6): playbooks/verify.yml against this
# node (inventory/local, connection local), as `tunefleet verify -i` runs it, with the quick benchmarks.
# The node's python3 on PATH is a venv's interpreter that holds torch; /usr/bin/python3 has none.
#
#   bash tests/device/fleet_venv.sh      # .whl/ (ansible-core and its needs, collections.tar.gz) carried in
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir fleet-venv
ansible_env || exit 3
note "== python3 on PATH: $(command -v python3); torch there: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
note "== /usr/bin/python3 torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
note "== root's login PATH: $(su -l root -c 'command -v python3' 2>&1 | tail -1)"
run_play() {
  local name=$1; shift
  local rc=0 start end
  start=$(date +%s.%N)
  mkdir -p "$work/$name"
  python3 "$site/bin/ansible-playbook" -i inventory/local playbooks/verify.yml -e "verify_node_report_dir=$work/$name" \
    "$@" >"$work/$name.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  note "== $name: ansible-playbook exit $rc, $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s"
  tail -5 "$work/$name.log" | tee -a "$summary"
  report=$(ls "$work/$name"/*/*/report.json 2>/dev/null | head -1) || true
  if [ -n "$report" ]; then
    $py - "$report" <<'PY' | tee -a "$summary"
import json, sys
r = json.load(open(sys.argv[1]))
print("run.python:", json.dumps(r["run"].get("python"))[:600])
for x in r["results"]:
    if x["check_id"].startswith("bench") and not x["check_id"].startswith(("bench.gpu_copy", "bench.pcie_link")):
        print(f"   {x['status']:5} {x['check_id']}: {x['reason'][:150]}")
PY
  else
    note "no report.json under $work/$name"
  fi
}
run_play auto
if [ -z "${AUTO_ONLY:-}" ]; then run_play named -e "verify_node_python=$(command -v python3)"; fi
pack fleet_venv
