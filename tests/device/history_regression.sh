#!/usr/bin/env bash
# The node's own history on a GPU machine (issue 16): three clean `tunefleet verify --local` runs recorded
# in a fresh history database, then a fourth with a competing pinned H2D copy loop on GPU 0, then
# `tunefleet history`. The fourth run must carry the regression verdict on bench.h2d.gpu0 (WARN
# "bench.h2d.gpu0 X GB/s, was Y GB/s over the last 3 runs"), GPU 1 none, and the history must show it.
#
#   bash tests/device/history_regression.sh       # writes $OUT/history_regression.tar.gz (or a new mktemp dir)
#
# HISTORY_VERIFY_ARGS adds verify options to every run (e.g. "--bench hostcopy" for a shorter proof).
# Runs verify from this checkout (no install): python3 -m verify.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD
out=${OUT:-$(mktemp -d)}  # runs as root: never a fixed name in /tmp
mkdir -p "$out"
work=$(mktemp -d /tmp/tunefleet-history.XXXXXX)
chmod 700 "$work"
summary=$work/summary.txt
py=python3
history=$work/h.sqlite
read -r -a extra <<<"${HISTORY_VERIFY_ARGS:-}"

note() { echo "$*" | tee -a "$summary"; }
run_verify() {  # run_verify NAME: reports in $work/NAME, log in $work/NAME.log
  local name=$1 start end rc
  start=$(date +%s.%N)
  $py -m verify verify --local --history "$history" --format json,md,html --out "$work/$name" "${extra[@]}" \
    >"$work/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  note "== $name: exit $rc, $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s"
  grep -E '^(PASS|WARN|FAIL|ERROR|SKIP) +(bench\.(h2d|d2h)|history)' "$work/$name.log" | tee -a "$summary"
}
check() {  # check NAME PYTHON-EXPRESSION MESSAGE: judge $work/NAME/report.json (rows: check_id -> result)
  $py - "$work/$1/report.json" "$2" "$3" <<'PY' | tee -a "$summary"
import json, sys
path, expr, message = sys.argv[1:4]
try:
    rows = {r["check_id"]: r for r in json.load(open(path))["results"]}
except OSError as exc:
    print(f"CHECK FAIL {message}: no report ({exc})"); sys.exit(0)
try:
    ok, why = eval(expr, {"rows": rows}), ""
except (KeyError, TypeError, ValueError) as exc:
    ok, why = False, f" ({type(exc).__name__}: {exc})"
print(f"CHECK {'PASS' if ok else 'FAIL'} {message}{why}")
PY
}

note "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv 2>&1 | tee -a "$summary"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
host=$($py -c 'import socket; print(socket.gethostname())')
note "GPUs: $ngpu, host $host"

for n in 1 2 3; do
  run_verify "clean$n"
done
check clean1 'not any(k.startswith("history.regression") for k in rows)' "run 1: no past, no regression verdict"
check clean3 '"bench.h2d.gpu0" in rows and not any(k.startswith("history.regression.bench.h2d") for k in rows)' \
  "run 3 (clean): no H2D regression against runs 1-2"

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
$py "$work/compete.py" 300 >"$work/compete.log" 2>&1 &
compete=$!
for _ in $(seq 60); do grep -q running "$work/compete.log" && break; kill -0 "$compete" 2>/dev/null || break; sleep 1; done
grep -q running "$work/compete.log" || { note "competing copy did not start:"; tail -3 "$work/compete.log" | tee -a "$summary"; }
run_verify competing4
kill "$compete" 2>/dev/null; wait "$compete" 2>/dev/null

check competing4 'rows["history.regression.bench.h2d.gpu0"]["status"] == "WARN" or rows["bench.h2d.gpu0"]["status"] == "FAIL"' \
  "run 4 (competing copy): regression WARN or FAIL on bench.h2d.gpu0"
check competing4 'rows["history.regression.bench.h2d.gpu0"]["status"] == "WARN" and "over the last 3 runs" in rows["history.regression.bench.h2d.gpu0"]["reason"]' \
  "run 4: the regression verdict names the median of the last 3 runs"
if [ "$ngpu" -ge 2 ]; then
  check competing4 '"history.regression.bench.h2d.gpu1" not in rows' "run 4: GPU 1 not flagged"
fi
$py - "$work" <<'PY' | tee -a "$summary"
import json, sys
for name in ("clean1", "clean2", "clean3", "competing4"):
    try:
        rows = {r["check_id"]: r for r in json.load(open(f"{sys.argv[1]}/{name}/report.json"))["results"]}
    except OSError:
        continue
    figures = ", ".join(f"{k} {rows[k]['observed']} {rows[k]['status']}" for k in sorted(rows)
                        if k.startswith(("bench.h2d.", "bench.d2h.", "bench.nccl_allreduce")))
    print(f"figures {name}: {figures}")
    for k in sorted(rows):
        if k.startswith("history."):
            print(f"  {rows[k]['status']} {k}: {rows[k]['reason']}")
PY

note "== tunefleet history"
$py -m verify history --history "$history" --host "$host" --check bench.h2d.gpu0 --check bench.h2d.gpu1 \
  >"$work/history_table.txt" 2>&1
cat "$work/history_table.txt" | tee -a "$summary"
$py -m verify history --history "$history" --host "$host" --format csv --out "$work/history.csv" >/dev/null 2>&1
$py -m verify history --history "$history" --host "$host" --format html --out "$work/history.html" >/dev/null 2>&1
$py -m verify history --history "$history" --regressions >"$work/regressions.txt" 2>&1
cat "$work/regressions.txt" | tee -a "$summary"
runs=$(grep -c '^20' "$work/history_table.txt")
[ "$runs" -eq 4 ] && note "CHECK PASS history table shows the 4 runs" || note "CHECK FAIL history table shows $runs runs, not 4"
grep -q 'bench.h2d.gpu0' "$work/regressions.txt" && note "CHECK PASS history --regressions names bench.h2d.gpu0" \
  || note "CHECK FAIL history --regressions does not name bench.h2d.gpu0"
grep -q '<svg' "$work/history.html" 2>/dev/null && note "CHECK PASS history HTML has its trend plots" \
  || note "CHECK FAIL history HTML has no plot"

note "== summary: $(grep -c '^CHECK PASS' "$summary") checks passed, $(grep -c '^CHECK FAIL' "$summary") failed"
tar -C "$(dirname "$work")" -czf "$out/history_regression.tar.gz" "$(basename "$work")"
echo "packed: $out/history_regression.tar.gz"
grep -E '^(CHECK|==)' "$summary"
