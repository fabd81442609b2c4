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
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir history
history=$work/h.sqlite
read -r -a extra <<<"${HISTORY_VERIFY_ARGS:-}"
verify=($py -m verify verify --local --history "$history" --format json,md,html)
show='^(PASS|WARN|FAIL|ERROR|SKIP) +(bench\.(h2d|d2h)|history)'
wall=''

note "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv 2>&1 | tee -a "$summary"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || true  # grep -c: 0 and exit 1 when none
host=$($py -c 'import socket; print(socket.gethostname())')
note "GPUs: $ngpu, host $host"

for n in 1 2 3; do
  run_verify "clean$n" "${extra[@]}"
done
check clean1 'not any(k.startswith("history.regression") for k in rows)' "run 1: no past, no regression verdict"
check clean3 '"bench.h2d.gpu0" in rows and not any(k.startswith("history.regression.bench.h2d") for k in rows)' \
  "run 3 (clean): no H2D regression against runs 1-2"

h2d_competitor
start_competitor 300 "competing copy"
run_verify competing4 "${extra[@]}"
stop_competitor

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
    except (OSError, ValueError, KeyError):
        continue
    figures = ", ".join(f"{k} {rows[k]['observed']} {rows[k]['status']}" for k in sorted(rows)
                        if k.startswith(("bench.h2d.", "bench.d2h.", "bench.nccl_allreduce")))
    print(f"figures {name}: {figures}")
    for k in sorted(rows):
        if k.startswith("history."):
            print(f"  {rows[k]['status']} {k}: {rows[k]['reason']}")
PY

note "== tunefleet history"
# `history` exits non-zero when it has regressions to show (and on errors): the output and the CHECK
# lines below judge it, so each exit status is kept in the summary instead of ending the script.
history_cmd() {  # history_cmd OUTFILE ARGS...: `verify history` with its output in OUTFILE
  local file=$1 rc=0; shift
  $py -m verify history --history "$history" "$@" >"$file" 2>&1 || rc=$?
  note "== history $*: exit $rc"
}
history_cmd "$work/history_table.txt" --host "$host" --check bench.h2d.gpu0 --check bench.h2d.gpu1
tee -a "$summary" <"$work/history_table.txt"
history_cmd "$work/history_csv.log" --host "$host" --format csv --out "$work/history.csv"
history_cmd "$work/history_html.log" --host "$host" --format html --out "$work/history.html"
history_cmd "$work/regressions.txt" --regressions
tee -a "$summary" <"$work/regressions.txt"
runs=$(grep -c '^20' "$work/history_table.txt") || true  # grep -c: 0 and exit 1 when none
if [ "$runs" -eq 4 ]; then note "CHECK PASS history table shows the 4 runs"; else note "CHECK FAIL history table shows $runs runs, not 4"; fi
if grep -q 'bench.h2d.gpu0' "$work/regressions.txt"; then note "CHECK PASS history --regressions names bench.h2d.gpu0"
else note "CHECK FAIL history --regressions does not name bench.h2d.gpu0"; fi
if grep -q '<svg' "$work/history.html" 2>/dev/null; then note "CHECK PASS history HTML has its trend plots"
else note "CHECK FAIL history HTML has no plot"; fi

pack history_regression
