#!/usr/bin/env bash
# Round 10 on one GPU machine, in one device call (the session's device time is short): the product first, then the
# scripts of issues 46, 47, 49 and 50, each under its own time limit, everything packed into $OUT/round10.tar.gz.
#   (1) `tunefleet verify --local` with no other argument, idle, then with a job holding the GPU (~90 % of its
#       memory and computing) -- the exit status, the summary line, the rows and the wall time of each;
#   (2) the hooks on this untuned node: tests/device/hook_start.sh (every mode's exit status and p50/p99, idle
#       and busy; issue 47: config-only findings exit 0);
#   (3) tests/device/kernel_log_forms.py and tests/device/smi_forms.sh (issue 46: the readers on this node's own
#       kernel log and nvidia-smi forms, the healthy twins);
#   (4) tests/device/fix_nccl_conf.sh (issue 49; .whl/ carried) and tests/device/pairwise_two_gpus.sh (issue 50;
#       on 1 GPU the parts a single GPU can run).
#
#   bash tests/device/round10.sh [STEPS]     # STEPS: a subset of "verify hooks readers fix pairwise sliced"
#                                            # (default: all but sliced)
set -uo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir round10
steps=${1:-verify hooks readers fix pairwise}
final_out=$out

# busy_job: a job holding ~90 % of GPU 0's memory and computing, as lib.sh's start_competitor runs its
# $work/compete.py (its "running" line is what start_competitor waits for; stop_competitor ends it).
busy_job() {
  cat >"$work/compete.py" <<'PY'
import sys, time, torch
free, total = torch.cuda.mem_get_info(0)
hold = torch.empty(int(free * 0.9) // 2, dtype=torch.bfloat16, device="cuda:0")
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda:0")
print(f"job holding {hold.numel() * 2 / 2**30:.1f} GiB of GPU 0 and computing: running", flush=True)
stop = time.monotonic() + float(sys.argv[1])
while time.monotonic() < stop:
    for _ in range(20):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
PY
  start_competitor "$1" "the job holding the GPU"
  note "== $(head -1 "$work/compete.log")"
}

verify_local() {
  local name=$1 start end rc=0
  start=$(date +%s.%N)
  $py -m verify verify --local --out "$work/$name" >"$work/$name.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  note "== verify --local ($name): exit $rc, $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s wall"
  grep -E '^(PASS|WARN|FAIL|ERROR|SKIP) |checks|summary|benchmarks' "$work/$name.log" | cut -c1-220 | tee -a "$summary"
}

# each STEP LIMIT CMD...: run one script under its own time limit with its own $OUT, log kept
each() {
  local name=$1 limit=$2 rc=0 start
  shift 2
  mkdir -p "$work/$name.out"
  start=$(date +%s)
  OUT=$work/$name.out timeout "$limit" "$@" >"$work/$name.log" 2>&1 || rc=$?
  note "== $name: exit $rc after $(( $(date +%s) - start )) s (limit $limit s)"
  { grep -E '^(CHECK|== )' "$work/$name.log" || true; } | cut -c1-240 | tee -a "$summary"
}

note "== machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2 | tr '\n' ' ')"
note "== commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for step in $steps; do
  case $step in
    verify)
      verify_local idle
      busy_job 120
      verify_local busy
      stop_competitor
      ;;
    hooks) each hook_start 200 bash tests/device/hook_start.sh 30 ;;
    readers)
      each kernel_log_forms 60 $py tests/device/kernel_log_forms.py
      each smi_forms 90 bash tests/device/smi_forms.sh
      ;;
    fix) each fix_nccl_conf 150 bash tests/device/fix_nccl_conf.sh ;;
    pairwise) each pairwise_two_gpus 150 bash tests/device/pairwise_two_gpus.sh ;;
    # issue 52 on the device machine's idle cores (not in the default set: ~7 min)
    sliced) each sliced_fleet_cost 400 env SIZES=1,10,100 SLICES=1,2,16 REPORT=0 bash tests/device/sliced_fleet_cost.sh ;;
  esac
done
out=$final_out
pack round10
