#!/usr/bin/env bash
# The scheduler hooks' start as roles/scheduler_hooks installs them (issue 39, prolog p99 <= 0.25 s):
#   (a) benchmarks/scheduler_modes.py idle: every mode through the hooks' launcher (-I -S, only the import
#       directories found) next to the prolog as `python -m verify` (site included), in the same run;
#   (b) the same with --busy: a job holding ~90% of every GPU's memory and computing; no hook process may
#       appear in nvidia-smi --query-compute-apps;
#   (c) where one prolog start goes: -X importtime of the launcher's prolog (largest imports), and the
#       interpreter alone with and without site;
#   (d) issue 47: each mode once through the launcher with the rendered desired state: its exit status, its
#       line, what the policy decided per finding; on an untuned node whose findings are configuration only
#       (the 1x H100: no RDMA device, so nvidia_peermem SKIPs) every mode must exit 0 ("CHECK PASS/FAIL").
#       Then (a) prints each mode's p50/p99 and the exit codes seen over the runs.
#
#   bash tests/device/hook_start.sh [RUNS]      # writes $OUT/hook_start.tar.gz
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir hook-start
runs=${1:-60}
note "== machine"
{ nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 || true; } | tee -a "$summary"
note "== interpreter: $(command -v $py) $($py -c 'import sys; print(sys.version.split()[0], sys.prefix)')"
# As the role installs it: byte-compiled once, so no hook run compiles
$py -I -m compileall -q verify >/dev/null

# (c) first, on the quiet machine
for flags in "-I" "-I -S"; do
  start=$(date +%s%N)
  for _ in $(seq 20); do $py $flags -c pass; done
  note "== interpreter start $flags: $(( ($(date +%s%N) - start) / 20000000 )) ms per start (20 starts)"
done
spec=$work/desired_state.json
$py -m verify spec >"$spec"
$py - "$spec" "$work" <<'PY' 2>&1 | tee -a "$summary"
import re, subprocess, sys
sys.path.insert(0, "benchmarks")
from scheduler_modes import hook_launch
argv = hook_launch(sys.executable)
argv[1:1] = ["-X", "importtime"]
done = subprocess.run([*argv, "check", "--mode", "prolog", "--spec", sys.argv[1], "--no-drain", "--state-dir=",
                       "--textfile-dir="], capture_output=True, text=True)
open(sys.argv[2] + "/importtime.txt", "w").write(done.stderr)
rows = [(int(m.group(1)), int(m.group(2)), m.group(3)) for m in
        (re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line) for line in done.stderr.splitlines()) if m]
print(f"== prolog via the launcher: exit {done.returncode}, {len(rows)} modules, {sum(r[0] for r in rows) / 1e3:.1f} ms "
      "of imports (self times summed)")
for self_us, total_us, name in sorted(rows, reverse=True)[:12]:
    print(f"   {self_us / 1e3:6.1f} ms self {total_us / 1e3:6.1f} ms with its imports  {name}")
PY

# (d) the verdicts and what the policy does about them, once per mode
note "== RDMA devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ' || true)(none listed: nvidia_peermem must SKIP)"
for mode in prolog epilog health npd; do
  rc=0
  $py - "$spec" "$work/$mode.json" "$mode" >"$work/$mode.log" 2>&1 <<'PY' || rc=$?
import os, subprocess, sys
sys.path.insert(0, "benchmarks")
from scheduler_modes import hook_launch
spec, report, mode = sys.argv[1:4]
done = subprocess.run([*hook_launch(sys.executable), "check", "--mode", mode, "--spec", spec, "--no-drain",
                       "--dry-run", "--state-dir=", "--textfile-dir=", "--report", report])
sys.exit(done.returncode)
PY
  note "== $mode through the launcher: exit $rc"
  tee -a "$summary" <"$work/$mode.log"
  $py - "$work/$mode.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(print(f"   no report: {exc}"))
print("   run.policy:", json.dumps(report["run"].get("policy")))
for row in report["results"]:
    if row["status"] != "PASS":
        print(f"   {row['status']:5} {row['check_id']}: {json.dumps((row.get('details') or {}).get('policy'))} "
              f"{row['reason'][:140]}")
PY
  if [ "$rc" -eq 0 ]; then note "CHECK PASS $mode exit 0"
  else note "CHECK FAIL $mode exit $rc (0 expected where every finding is configuration; see the rows above)"; fi
done

# (a) idle
rc=0
$py benchmarks/scheduler_modes.py --runs "$runs" --verify-runs 5 2>&1 | tee -a "$summary" || rc=$?
[ "$rc" -eq 0 ] && note "CHECK PASS scheduler_modes idle" || note "CHECK FAIL scheduler_modes idle: exit $rc"
# (b) busy
rc=0
$py benchmarks/scheduler_modes.py --busy --runs "$runs" --verify-runs 0 2>&1 | tee -a "$summary" || rc=$?
[ "$rc" -eq 0 ] && note "CHECK PASS scheduler_modes --busy (no hook process among the compute apps)" \
  || note "CHECK FAIL scheduler_modes --busy: exit $rc"
pack hook_start
