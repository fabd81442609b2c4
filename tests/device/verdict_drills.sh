#!/usr/bin/env bash
# The verdicts on a GPU machine (issues 26 and 27):
#   (a) `tunefleet verify --local` with no argument: the summary line, the benchmark rows, the profile auto
#       picked, the whole command's wall time;
#   (b) every live drill of tests/helpers/drills.py (a real faulty output answering the one command that
#       shows the fault, everything else live) through `verify --local --inject DIR`: CHECK lines;
#   (c) the roles applied and restored (tests/device/gpu_node_apply.sh, .whl/ carried in), with the sysctl
#       keys the node already had above the recommendation (vm.max_map_count, tcp_rmem's default) shown
#       before, after converge and after restore.
#
#   bash tests/device/verdict_drills.sh      # writes $OUT/verdict_drills.tar.gz
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir verdicts
verify=($py -m verify verify --local)
show='^benchmarks|^profile|^hardware|^(PASS|WARN|FAIL|ERROR|SKIP) +bench|^[a-z0-9.-]+: PASS [0-9]+'
wall=' wall for the whole command'

note "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | tee -a "$summary"

# (a) the main command, no argument
run_verify a_default
check a_default '(report["run"]["bench"].get("profile") or "").endswith("-model")' "auto picked a model profile"
check a_default 'all(r["status"] != "ERROR" for k, r in rows.items() if k.startswith("bench"))' "no benchmark ERROR"
check a_default 'not [k for k, r in rows.items() if k.startswith("health.") and r["status"] == "FAIL"]' \
  "no health FAIL on the healthy machine"

# (b) the drills, live
$py -m tests.helpers.drills "$work/drills" | tee -a "$summary"
for dir in "$work"/drills/*/; do
  name=$(basename "$dir")
  rc=0
  # A drill shows a fault: verify exits 1 (a FAIL) on purpose; the judge below reads the exit status.
  "${verify[@]}" --no-bench --no-history --inject "$dir" --format json --quiet --out "$work/drill-$name" \
    >"$work/drill-$name.log" 2>&1 || rc=$?
  echo "$rc" >"$work/drill-$name.rc"
done
$py - "$work" <<'PY' | tee -a "$summary"
import json, sys
from pathlib import Path
from tests.helpers.drills import Expect, judge
work = Path(sys.argv[1])
for name, entry in json.loads((work / "drills" / "expected.json").read_text()).items():
    rc = (work / f"drill-{name}.rc").read_text().strip()
    try:
        report = json.loads((work / f"drill-{name}" / "report.json").read_text())
    except OSError as exc:
        print(f"CHECK FAIL drill {name}: no report (exit {rc}, {exc})"); continue
    for expect in (Expect(**e) for e in entry["expect"]):
        row = next((r for r in report["results"] if r["check_id"] == expect.check_id), {})
        said = f"{expect.check_id} {row.get('status')} {(row.get('details') or {}).get('action', '-')}: {row.get('reason', '')[:150]}"
        problem = judge(report, expect)
        print(f"CHECK {'FAIL' if problem else 'PASS'} drill {name} (exit {rc}): {problem or said}")
    answered = (report["run"].get("injected") or {}).get("answered")
    print(f"   injected: {answered}")
PY

# (c) the roles: what the node already had above the recommendation must stay
keys="vm.max_map_count net.ipv4.tcp_rmem net.ipv4.tcp_wmem net.core.rmem_max fs.nr_open"
# sysctl exits non-zero when a key is missing on this kernel; the others are still printed and compared.
note "== sysctl before"; { sysctl $keys 2>&1 || true; } | tee -a "$summary"
rc=0
OUT="$work/apply" bash tests/device/gpu_node_apply.sh >"$work/apply.stdout" 2>&1 || rc=$?
note "== apply: exit $rc, $(grep -cE '^=== rc=0' "$work/apply/apply.log" 2>/dev/null || true) steps rc=0"
# No apply.log (the script stopped before its first step): its stdout says why.
{ grep -E '^=== |PLAY RECAP|changed=|max_map_count|tcp_rmem|tcp_wmem' "$work/apply/apply.log" \
    || tail -5 "$work/apply.stdout"; } | tee -a "$summary"
note "== sysctl after restore"; { sysctl $keys 2>&1 || true; } | tee -a "$summary"

pack verdict_drills
