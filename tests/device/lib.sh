# shellcheck shell=bash
# What the device scripts share. Source it from the repository root (the scripts run from there, as root):
#
#   . "$(dirname "$0")/lib.sh"
#   device_workdir NAME    # the env below; $out, $work, $summary, $py
#   verify=(...)           # the verify command run_verify runs (it appends --out and the run's arguments)
#   show='REGEX'           # the lines of verify's log run_verify copies into the summary
#
# Functions: note, run_verify, check (a Python expression over a run's report.json), h2d_competitor,
# start_competitor, pack. Every verdict is a `CHECK PASS|FAIL` line in $summary.
#
# The scripts run under `set -euo pipefail`: a command that may end non-zero on purpose (verify with a
# FAIL verdict, a drill, a role that refuses, grep finding nothing) says so where it runs
# (`cmd || rc=$?`, or `|| true` with the reason); anything else stops the script, and the ERR trap
# below names the line.
trap 'echo "${0##*/}: line $LINENO: exit $? from: $BASH_COMMAND" >&2' ERR

# NVLink multicast (NVLS) off for NCCL, torch symmetric memory and NVSHMEM; Python output unbuffered.
device_env() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
}

# device_workdir NAME: device_env, verify from this checkout (no install), $out ($OUT or a fresh mktemp
# dir), $work a fresh /tmp/tunefleet-NAME.XXXXXX of mode 700 (runs as root: never a fixed name in /tmp),
# $summary in it, $py.
device_workdir() {
  device_env
  export PYTHONPATH=$PWD
  out=${OUT:-$(mktemp -d)}
  mkdir -p "$out"
  work=$(mktemp -d "/tmp/tunefleet-$1.XXXXXX")
  chmod 700 "$work"
  summary=$work/summary.txt
  py=python3
  verify=()
  show=''
  wall=' wall for the whole command'
}

# ansible_env: ansible-core and its pure-Python needs from the carried .whl/ into a fresh mktemp
# site ($site, on PYTHONPATH), the collections of .whl/collections.tar.gz into a fresh $collections
# with this checkout as tunefleet.gpu_node (use_roles_from TREE points it elsewhere), ANSIBLE_CONFIG.
ansible_env() {
  site=$(mktemp -d)
  collections=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl || return 3
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  mkdir -p "$collections/ansible_collections/tunefleet"
  tar -C "$collections/ansible_collections" -xzf .whl/collections.tar.gz
  export ANSIBLE_COLLECTIONS_PATH=$collections ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0
  use_roles_from "$PWD"
}

# use_roles_from TREE: the collection tunefleet.gpu_node (modules, filters) is TREE from now on.
use_roles_from() {
  ln -sfn "$1" "$collections/ansible_collections/tunefleet/gpu_node"
}

note() { echo "$*" | tee -a "$summary"; }

# run_verify NAME [verify args...]: "${verify[@]}" --out $work/NAME ARGS, log in $work/NAME.log; the exit
# status and wall time, then the log's lines matching $show, go to the summary.
run_verify() {
  local name=$1; shift
  local start end rc
  start=$(date +%s.%N)
  rc=0
  # verify exits 1 on a FAIL verdict and 2/3 when it could not judge: the summary and check judge it.
  "${verify[@]}" --out "$work/$name" "$@" >"$work/$name.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  note "== $name: exit $rc, $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s$wall"
  { grep -E "$show" "$work/$name.log" || true; } | tee -a "$summary"  # no matching line is no error
}

# check NAME PYTHON-EXPRESSION MESSAGE: judge $work/NAME/report.json. The expression sees rows (check_id ->
# result), bench (run.bench), gpu (the bench.gpu* rows) and report; a missing report or key is a FAIL.
check() {
  $py - "$work/$1/report.json" "$2" "$3" <<'PY' | tee -a "$summary"
import json, sys
path, expr, message = sys.argv[1:4]
try:
    report = json.load(open(path))
    rows = {r["check_id"]: r for r in report["results"]}
except OSError as exc:
    print(f"CHECK FAIL {message}: no report ({exc})"); sys.exit(0)
bench = (report.get("run") or {}).get("bench") or {}
gpu = {k: r for k, r in rows.items() if k.startswith("bench.gpu")}
try:
    ok, why = eval(expr, {"rows": rows, "bench": bench, "report": report, "gpu": gpu}), ""
except (KeyError, TypeError, ValueError, StopIteration) as exc:
    ok, why = False, f" ({type(exc).__name__}: {exc})"
print(f"CHECK {'PASS' if ok else 'FAIL'} {message}{why}")
PY
}

# h2d_competitor: $work/compete.py, a pinned 1 GiB host-to-GPU-0 copy loop for argv[1] seconds.
h2d_competitor() {
  cat >"$work/compete.py" <<'PY'
import sys, time, torch
host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
print("competing H2D copy on GPU 0 running", flush=True)
stop = time.monotonic() + float(sys.argv[1])
while time.monotonic() < stop:
    for _ in range(8):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
PY
}

# start_competitor SECONDS WHAT: $work/compete.py in the background ($compete: its pid, log compete.log),
# waiting up to 60 s for its "running" line; says so in the summary when it did not start (the run it
# competes with then shows no effect, and its check FAILs).
start_competitor() {
  $py "$work/compete.py" "$1" >"$work/compete.log" 2>&1 &
  compete=$!
  for _ in $(seq 60); do
    if grep -q running "$work/compete.log" || ! kill -0 "$compete" 2>/dev/null; then break; fi
    sleep 1
  done
  if ! grep -q running "$work/compete.log"; then
    note "$2 did not start:"
    tail -3 "$work/compete.log" | tee -a "$summary"
  fi
}

# stop_competitor: end $compete (started by start_competitor) and reap it.
stop_competitor() {
  [ -n "${compete:-}" ] || return 0
  # It may have ended on its own already (kill then fails); reaped, it reports the signal (143).
  kill "$compete" 2>/dev/null || true
  wait "$compete" 2>/dev/null || true
  compete=""
}

# pack NAME: the CHECK totals, $work as $out/NAME.tar.gz, then every CHECK and == line again.
pack() {
  # grep -c prints 0 and exits 1 when nothing matched: the count is what is wanted.
  note "== summary: $(grep -c '^CHECK PASS' "$summary" || true) checks passed, $(grep -c '^CHECK FAIL' "$summary" || true) failed"
  tar -C "$(dirname "$work")" -czf "$out/$1.tar.gz" "$(basename "$work")"
  echo "packed: $out/$1.tar.gz"
  grep -E '^(CHECK|==)' "$summary"  # always matches: the summary line above starts with ==
}
