#!/usr/bin/env bash
# The scheduler's hooks on a GPU machine (issue 29), and the pair launcher with both "nodes" on one host
# (issue 30):
#   (a) `tunefleet check --mode prolog` once: where its GPU facts and kernel events came from (NVML,
#       /dev/kmsg), its verdict line, the textfile it wrote;
#   (b) benchmarks/scheduler_modes.py: p50/p99 of every mode over 100 runs against `verify --local
#       --no-bench` in the same run, NVML time per GPU and the 8-GPU estimate;
#   (c) tests/device/pairwise_one_host.sh.
#
#   bash tests/device/scheduler_checks.sh      # writes $OUT/scheduler_checks.tar.gz
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir scheduler
note "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | tee -a "$summary"

# As roles/scheduler_hooks installs it: byte-compiled once, so no hook run compiles
$py -I -m compileall -q verify >/dev/null

# (a) one prolog, its state and textfile in fresh private directories
state=$(mktemp -d) metrics=$(mktemp -d)
rc=0
# The prolog exits non-zero when it judges the node unfit (that is its verdict, shown here).
$py -m verify check --mode prolog --no-drain --state-dir "$state" --textfile-dir "$metrics" \
  --report "$work/prolog.json" >"$work/prolog.log" 2>&1 || rc=$?
note "== prolog: exit $rc"
tee -a "$summary" <"$work/prolog.log"
$py - "$work/prolog.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    run = json.load(open(sys.argv[1]))["run"]
except (OSError, ValueError, KeyError) as exc:
    print(f"CHECK FAIL the prolog wrote its report: {exc}"); sys.exit(0)
print("gpu facts from:", run.get("gpu_source"), "| kernel events from:", run.get("kernel_log"))
PY
# No textfile (the prolog failed to write one) counts 0 samples and prints no line: both are the record.
note "== textfile: $(cat "$metrics"/*.prom 2>/dev/null | grep -vc '^#' || true) samples"
{ grep -hE '^tunefleet_(last_run|check_status)' "$metrics"/*.prom 2>/dev/null || true; } | head -5 | tee -a "$summary"

# (b) the modes' speed
rc=0
$py benchmarks/scheduler_modes.py --runs 100 --verify-runs 20 2>&1 | tee -a "$summary" || rc=$?
[ "$rc" -eq 0 ] || note "CHECK FAIL benchmarks/scheduler_modes.py exit $rc"

# (c) the pair launcher, both sides here (it prints "pairwise_one_host: OK" and exits 0 when it held)
rc=0
PYTHON=$py bash tests/device/pairwise_one_host.sh >"$work/pairwise_one_host.log" 2>&1 || rc=$?
tail -4 "$work/pairwise_one_host.log" | tee -a "$summary"
if [ "$rc" -eq 0 ]; then note "CHECK PASS pairwise_one_host.sh"; else note "CHECK FAIL pairwise_one_host.sh exit $rc"; fi

rm -rf -- "$state" "$metrics"
pack scheduler_checks
