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
set -uo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir scheduler
note "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | tee -a "$summary"

# As roles/scheduler_hooks installs it: byte-compiled once, so no hook run compiles
$py -I -m compileall -q verify >/dev/null

# (a) one prolog, its state and textfile in fresh private directories
state=$(mktemp -d) metrics=$(mktemp -d)
$py -m verify check --mode prolog --no-drain --state-dir "$state" --textfile-dir "$metrics" \
  --report "$work/prolog.json" >"$work/prolog.log" 2>&1
note "== prolog: exit $?"
tee -a "$summary" <"$work/prolog.log"
$py - "$work/prolog.json" <<'PY' | tee -a "$summary"
import json, sys
run = json.load(open(sys.argv[1]))["run"]
print("gpu facts from:", run.get("gpu_source"), "| kernel events from:", run.get("kernel_log"))
PY
note "== textfile: $(cat "$metrics"/*.prom 2>/dev/null | grep -vc '^#') samples"
grep -E '^tunefleet_(last_run|check_status)' "$metrics"/*.prom 2>/dev/null | head -5 | tee -a "$summary"

# (b) the modes' speed
$py benchmarks/scheduler_modes.py --runs 100 --verify-runs 20 2>&1 | tee -a "$summary"

# (c) the pair launcher, both sides here
PYTHON=$py bash tests/device/pairwise_one_host.sh 2>&1 | tail -4 | tee -a "$summary"

rm -rf -- "$state" "$metrics"
pack scheduler_checks
