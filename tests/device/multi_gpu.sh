#!/usr/bin/env bash
# The main job on a multi-GPU node (issues 39 and 40): `tunefleet verify --local` with no argument, idle and
# with jobs on the GPUs, and the verdicts an operator acts on.
#
#   bash tests/device/multi_gpu.sh [BEFORE_TREE]    # writes $OUT/multi_gpu.tar.gz
#
# BEFORE_TREE (optional): an older checkout of this project; its `verify --local` is timed twice first, on
# the same machine, for the before/after table.
# (a) verify --local twice in a row on the idle node: time, summary, benchmark rows, phases; the second
#     run gives no history drift WARN on readings
# (b) CUDA_VISIBLE_DEVICES reversed (and one GPU alone): rows named by the physical GPU (NVML index and bus
#     id), the all-reduce on the GPUs the process sees
# (c) a job holding ~90% of every GPU's memory and computing: ERROR action application naming its pid, no
#     FAIL, exit 3, the engine never on those GPUs
# (d) a competing matmul on the last GPU only: that GPU named with its process, the others measured
# (e) NCCL_P2P_DISABLE=1 appended to /etc/nccl.conf: the all-reduce FAILs naming that line (restored after)
# (f) the engine next to plain torch loops (benchmarks/gpu_engines_side_by_side.py)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir multi-gpu
verify=($py -m verify verify --local)
show='^(PASS|WARN|FAIL|ERROR|SKIP) +bench|^time:|summary|^vm|PASS [0-9]+ +WARN'
before_tree=${1:-}

nvidia-smi --query-gpu=index,name,pci.bus_id,serial --format=csv | tee -a "$summary"
ngpu=$(nvidia-smi -L | grep -c '^GPU ') || true
last=$((ngpu - 1))
nvidia-smi topo -m >"$work/topo_m.txt" 2>&1 || true
nvidia-smi topo -p2p r >"$work/topo_p2p_r.txt" 2>&1 || true
nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv >"$work/compute_apps_idle.csv" 2>&1 || true

if [ -n "$before_tree" ] && [ -d "$before_tree/verify" ]; then
  for n in 1 2; do
    start=$(date +%s.%N)
    rc=0
    (cd "$before_tree" && PYTHONPATH=$PWD $py -m verify verify --local --out "$work/before$n" --history "$work/before.sqlite") \
      >"$work/before$n.log" 2>&1 || rc=$?
    end=$(date +%s.%N)
    note "== before$n: exit $rc, $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s wall for the whole command"
  done
fi

# (a) idle, twice
run_verify a1_idle
run_verify a2_idle
check a2_idle 'not [k for k, r in rows.items() if k.startswith("history.drift") and r["status"] != "PASS"]' \
  "second idle run: no history drift WARN"
check a1_idle 'all(r["status"] in ("PASS", "SKIP") or r.get("details", {}).get("action") for k, r in rows.items() if k.startswith("bench"))' \
  "every benchmark row that is not PASS/SKIP carries an action"
check a1_idle '(report["run"].get("phases") or {}).get("engine.torch_import_s") is not None' "phases recorded"

# (b) another CUDA numbering
if [ "$ngpu" -ge 2 ]; then
  reversed=$(seq "$last" -1 0 | paste -sd, -)
  (export CUDA_VISIBLE_DEVICES=$reversed; run_verify b_reversed)
  check b_reversed 'rows["bench.gpu_hbm.gpu0"]["details"]["gpu_identity"]["0"]["bus_id"] == rows["bench.h2d.gpu0"]["details"]["gpu_identity"]["bus_id"]' \
    "reversed CUDA order: GPU 0's HBM and H2D rows name the same bus id"
  check b_reversed 'rows["bench.nccl_allreduce"]["status"] == "PASS"' "reversed CUDA order: all-reduce PASS"
  (export CUDA_VISIBLE_DEVICES=$last; run_verify b_one)
  check b_one "'bench.gpu_hbm.gpu$last' in rows and 'bench.gpu_hbm.gpu0' not in rows" "one GPU visible: its rows carry its own index"
fi

# (c) a job on every GPU
cat >"$work/busy.py" <<'PY'
import sys, threading, time, torch
n = torch.cuda.device_count()
held = []
for i in range(n):
    free, _ = torch.cuda.mem_get_info(i)
    held.append(torch.empty(int(free * 0.9), dtype=torch.uint8, device=i))
def spin(i):
    a = torch.randn(4096, 4096, device=i, dtype=torch.bfloat16)
    while True:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize(i)
for i in range(n):
    threading.Thread(target=spin, args=(i,), daemon=True).start()
print("busy job running on", n, "GPUs", flush=True)
time.sleep(float(sys.argv[1]))
PY
cp "$work/busy.py" "$work/compete.py"
start_competitor 120 "busy job"
nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv >"$work/compute_apps_busy.csv" 2>&1 || true
run_verify c_busy
nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv >"$work/compute_apps_after.csv" 2>&1 || true
stop_competitor
check c_busy '[k for k, r in rows.items() if k.startswith("bench") and r["status"] == "FAIL"] == []' "busy: no benchmark FAIL"
check c_busy 'rows["bench.gpu_hbm.gpu0"]["status"] == "ERROR" and rows["bench.gpu_hbm.gpu0"]["details"]["action"] == "application" and "pid" in rows["bench.gpu_hbm.gpu0"]["reason"]' \
  "busy: ERROR application naming the pid"

# (d) a competing matmul on the last GPU only
cat >"$work/compete.py" <<PY
import sys, time, torch
a = torch.randn(8192, 8192, device=$last, dtype=torch.bfloat16)
print("competing matmul on GPU $last running", flush=True)
stop = time.monotonic() + float(sys.argv[1])
while time.monotonic() < stop:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize($last)
PY
start_competitor 120 "competing matmul"
run_verify d_compete
stop_competitor
check d_compete "rows['bench.gpu_hbm.gpu$last']['status'] == 'ERROR' and 'pid' in rows['bench.gpu_hbm.gpu$last']['reason']" \
  "compete: the busy GPU named with its process"
if [ "$ngpu" -ge 2 ]; then
  check d_compete "rows['bench.gpu_hbm.gpu0']['status'] in ('PASS', 'WARN')" "compete: GPU 0 still measured"
fi

# (e) an nccl.conf line that turns P2P off
if [ "$ngpu" -ge 2 ]; then
  conf=/etc/nccl.conf
  saved=$work/nccl.conf.saved
  had_conf=0
  if [ -e "$conf" ]; then cp -p "$conf" "$saved"; had_conf=1; fi
  restore_conf() { if [ "$had_conf" = 1 ]; then cp -p "$saved" "$conf"; else rm -f "$conf"; fi; }
  trap restore_conf EXIT
  echo "NCCL_P2P_DISABLE=1" >>"$conf"
  line=$(grep -n '^NCCL_P2P_DISABLE=1' "$conf" | tail -1 | cut -d: -f1)
  run_verify e_p2p_disabled
  # What NCCL itself printed there (the transport lines the cause is checked against).
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET CUDA_DEVICE_ORDER=PCI_BUS_ID $py -m verify.bench.gpu_engine \
    --sections allreduce --allreduce-min-bytes 8M --allreduce-max-bytes 64M >"$work/e_engine_nccl.log" 2>&1 || true
  note "NCCL lines naming a transport: $(grep -c ' via ' "$work/e_engine_nccl.log" || true); first: $(grep -m1 ' via ' "$work/e_engine_nccl.log" || true)"
  restore_conf
  trap - EXIT
  check e_p2p_disabled "rows['bench.nccl_allreduce']['status'] == 'FAIL' and 'NCCL_P2P_DISABLE=1 ($conf line $line)' in rows['bench.nccl_allreduce']['reason']" \
    "P2P off in nccl.conf: all-reduce FAIL naming the line"
  note "nccl.conf restored: $(if [ "$had_conf" = 1 ]; then cmp -s "$saved" "$conf" && echo identical || echo DIFFERENT; else [ -e "$conf" ] && echo 'STILL THERE' || echo absent; fi)"
fi

# (f) fidelity
note "== side by side, pairs serial"
$py benchmarks/gpu_engines_side_by_side.py --json "$work/side_by_side.json" 2>&1 | tee -a "$summary" || true
if [ "$ngpu" -ge 4 ]; then
  note "== side by side, disjoint pairs concurrent"
  $py benchmarks/gpu_engines_side_by_side.py --pair-schedule concurrent --json "$work/side_by_side_concurrent.json" \
    2>&1 | tee -a "$summary" || true
fi

for name in a1_idle b_reversed c_busy d_compete e_p2p_disabled; do
  [ -f "$work/$name/report.json" ] && $py - "$work/$name/report.json" "$name" <<'PY' | tee -a "$summary"
import json, sys
report = json.load(open(sys.argv[1]))
print(f"-- {sys.argv[2]}: phases {json.dumps(report['run'].get('phases'))}")
for r in report["results"]:
    if r["check_id"].startswith(("bench", "health.p2p")):
        print(f"   {r['status']:5} {r['check_id']}: {r['reason'][:230]} [{(r.get('details') or {}).get('action', '')}]")
PY
done
pack multi_gpu
