#!/usr/bin/env bash
# GPU engines in verify's quick set (issue 19), on a GPU machine:
#
#   bash tests/device/gpu_engines.sh        # writes $OUT/gpu_engines.tar.gz (or a new mktemp dir)
#
# (a) `verify --local`, no argument: the quick set with the per-GPU HBM and matmul rows and the pair
#     rows (1 GPU: pair rows SKIP), timed; the engine's raw stdout (parallel and --serial) for fixtures
# (b) 2+ GPUs: the same with a competing BF16 matmul loop on GPU 1: must FAIL naming GPU 1, GPU 0 PASS
# (c) `verify --local --bench burn` for 30 s (verify_bench_options.burn.duration_s): must run clean
# (d) benchmarks/gpu_engines_side_by_side.py: engine / plain torch loop per figure (goal >= 0.97), and
#     the both-ways copy against nccl-tests sendrecv_perf where .carry/nccl-tests is carried in
# Every verdict is a `CHECK PASS|FAIL` line in summary.txt (inside the tarball and on stdout).
# Back in $OUT: gpu_engines.tar.gz (summary, logs, each run's report.json, engine stdout/stderr; no
# build tree, no HTML; its size is printed, it must stay under the device tool's 16 MiB per file) and,
# as separate small files, $OUT/fixtures/gpu_{engine,burn}_<model>x<GPUs>*.stdout: the engine's raw
# payloads, named for tests/fixtures/bench/ (see the README there).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir gpu-engines
verify=($py -m verify verify --local --format json,md)
show='^benchmarks|^skipped|^profile|^hardware|^(PASS|WARN|FAIL|ERROR|SKIP) +bench\.gpu'
compete=""

# On EXIT, also after a stop: every command here must not fail (a failure would end the trap early).
finish() {
  stop_competitor
  note "== CHECK totals: $(grep -c '^CHECK PASS' "$summary" || true) PASS, $(grep -c '^CHECK FAIL' "$summary" || true) FAIL"
  # Only what the note and the fixtures need: never the nccl-tests build tree (tens of MiB of binaries).
  (cd "$work" && find . -maxdepth 2 -type f \( -name summary.txt -o -name '*.log' -o -name '*.stdout' \
      -o -name '*.stderr' -o -name report.json -o -name side_by_side.json -o -name '*.json' -path './burn*' \) \
      -not -path './nccl-tests-build/*' | sort >"$work/.packed") || true
  if tar -C "$work" -czf "$out/gpu_engines.tar.gz" -T "$work/.packed"; then
    local size; size=$(stat -c %s "$out/gpu_engines.tar.gz") || size=0
    note "tarball: $out/gpu_engines.tar.gz, $(wc -l <"$work/.packed") files, $size bytes$( [ "$size" -gt 15728640 ] && echo ' (OVER 15 MiB: will not come back)')"
  fi
  if [ -d "$work/fixtures" ] && [ -n "$(ls -A "$work/fixtures")" ]; then
    mkdir -p "$out/fixtures" && cp "$work"/fixtures/* "$out/fixtures/"
    note "fixtures: $(cd "$work/fixtures" && for f in *; do printf '%s (%s bytes) ' "$f" "$(stat -c %s "$f")"; done)"
  fi
  rm -rf "$work" || true
}
trap finish EXIT

rows_table() {  # every bench.gpu row with its reason (clocks next to the figure), for the note
  $py - "$work/$1/report.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(0)
for r in report["results"]:
    if r["check_id"].startswith("bench.gpu"):
        print(f"  {r['status']:5} {r['check_id']:36} {r['reason'][:400]}")
PY
}

note "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id,clocks.max.sm,clocks.max.memory,power.limit --format=csv 2>&1 | tee -a "$summary"
$py -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tee -a "$summary"
$py -c 'import pynvml' 2>/dev/null || note "WARNING: pynvml missing: no NVML samples (rows say so)"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || true  # grep -c: 0 and exit 1 when none
note "GPUs: $ngpu"
# Fixture names: gpu_engine_h200x2.stdout, gpu_engine_h100x1.stdout, ... (model from the GPU's name)
# No model in the name (grep finds nothing): the tag falls back to "gpu".
model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' \
  | grep -oE '\b[a-z][0-9]{2,4}\b' | head -1) || true
tag=${model:-gpu}x$ngpu
mkdir -p "$work/fixtures"

# (a) the main command, no argument
run_verify a_default
rows_table a_default
check a_default 'bench.get("selection") == "quick" and "gpu" in bench.get("ran", [])' "quick set ran the GPU engines"
check a_default 'bench.get("wall_s", 1e9) <= 60' "whole quick set <= 60 s (wall_s in the report)"
check a_default 'rows["bench.gpu"]["observed"] <= 25' "GPU engines <= 25 s (bench.gpu observed = its wall time)"
check a_default 'all(r["status"] != "ERROR" for r in gpu.values())' "no GPU engine ERROR (nothing above its physical peak)"
check a_default 'all(f"bench.gpu_{k}.gpu{i}" in rows for k in ("hbm", "matmul") for i in range('"$ngpu"'))' "HBM and matmul row per GPU"
check a_default 'all(r["details"]["raw"]["iters"] == 20 for k, r in gpu.items() if k.startswith("bench.gpu_matmul."))' "matmul: one batch of 20 after the warm-ups (issue 19's plain loop, before the power cap)"
check a_default 'all(r["status"] in ("PASS", "WARN") for k, r in gpu.items() if k.startswith(("bench.gpu_hbm", "bench.gpu_matmul")))' "per-GPU rows PASS"
check a_default 'all(r["details"]["nvml"] and all(w and w.get("samples") for w in r["details"]["nvml"].values()) for k, r in gpu.items() if "details" in r and "nvml" in r["details"])' "NVML samples next to every figure"
if [ "$ngpu" -ge 2 ]; then
  check a_default 'sum(1 for k in rows if k.startswith("bench.gpu_copy.gpu")) == '"$((ngpu * (ngpu - 1)))" "one-way copy row per ordered pair"
  check a_default 'sum(1 for k in rows if k.startswith("bench.gpu_copy_bidir.gpu")) == '"$((ngpu * (ngpu - 1)))" "both-ways copy row per ordered pair"
  check a_default 'all(r["status"] in ("PASS", "WARN") for k, r in gpu.items() if k.startswith("bench.gpu_copy"))' "pair rows PASS"
  # Both directions ran in one window: each GPU's readings must be the same in the i->j and j->i rows.
  check a_default 'all(r["details"]["nvml"] == rows[k.rsplit(".", 1)[0] + ".gpu" + k.rsplit("_to_gpu", 1)[1] + "_to_gpu" + k.rsplit(".gpu", 1)[1].split("_")[0]]["details"]["nvml"] for k, r in gpu.items() if k.startswith("bench.gpu_copy_bidir.gpu"))' "both-ways rows: each GPU's NVML readings under its own index"
else
  check a_default 'rows["bench.gpu_copy"]["status"] == "SKIP" and "one GPU" in rows["bench.gpu_copy"]["reason"]' "1 GPU: pair rows SKIP with the reason"
fi
# the engine's raw output, for tests/fixtures/bench (parallel as verify runs it, then one GPU at a time)
for mode in parallel serial; do
  extra=(); rc=0
  if [ "$mode" = serial ]; then extra=(--serial); fi
  # Its exit status is shown; the payload check below judges what it printed.
  CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 300 $py -m verify.bench.gpu_engine --mode quick --seconds 1 --pair-seconds 0.25 \
    "${extra[@]}" >"$work/engine_quick_$mode.stdout" 2>"$work/engine_quick_$mode.stderr" || rc=$?
  note "== engine --mode quick ($mode): exit $rc"; tee -a "$summary" <"$work/engine_quick_$mode.stderr" | tail -n 8
done
cp "$work/engine_quick_parallel.stdout" "$work/fixtures/gpu_engine_$tag.stdout"
cp "$work/engine_quick_serial.stdout" "$work/fixtures/gpu_engine_${tag}_serial.stdout"
$py - "$work/engine_quick_parallel.stdout" "$work/engine_quick_serial.stdout" <<'PY' | tee -a "$summary"
import sys
from verify.engine import read_result
par, ser = (read_result(open(p).read()) for p in sys.argv[1:3])
if not par or not ser or not par.get("per_gpu") or not ser.get("per_gpu"):
    print("CHECK FAIL engine payloads for parallel and serial"); sys.exit(0)
serial = {r["index"]: r for r in ser["per_gpu"]}
for row in par["per_gpu"]:
    for kind, key in (("hbm", "gbps"), ("matmul", "tflops")):
        ratio = row[kind][key] / serial[row["index"]][kind][key]
        print(f"CHECK {'PASS' if ratio >= 0.97 else 'FAIL'} parallel/serial {kind} gpu{row['index']}: "
              f"{row[kind][key]:.1f} / {serial[row['index']][kind][key]:.1f} = {ratio:.3f} (>= 0.97)")
print(f"engine time: parallel {par['engine_s']} s, serial {ser['engine_s']} s")
PY

# (b) a competing matmul loop on GPU 1
if [ "$ngpu" -ge 2 ]; then
  cat >"$work/compete.py" <<'PY'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda:1", dtype=torch.bfloat16)
print("competing matmul on GPU 1 running", flush=True)
stop = time.monotonic() + float(sys.argv[1])
while time.monotonic() < stop:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize(1)
PY
  CUDA_DEVICE_ORDER=PCI_BUS_ID start_competitor 240 "competing matmul"
  run_verify b_competing_matmul --bench gpu
  stop_competitor
  rows_table b_competing_matmul
  check b_competing_matmul 'any(r["status"] == "FAIL" and "GPU 1" in r["reason"] for k, r in gpu.items() if k.endswith(".gpu1"))' "competing matmul: a GPU 1 row FAILs naming GPU 1"
  check b_competing_matmul 'all(r["status"] in ("PASS", "WARN") for k, r in gpu.items() if k.endswith(".gpu0"))' "competing matmul: GPU 0 rows PASS"
else
  note "== b_competing_matmul: skipped (needs 2 GPUs)"
fi

# (c) the burn, 30 s
printf '{"verify_bench_options": {"burn": {"duration_s": 30}}}\n' >"$work/burn30.json"
run_verify c_burn --bench burn --vars "$work/burn30.json"
rows_table c_burn
check c_burn 'all(f"bench.gpu_burn.gpu{i}" in rows for i in range('"$ngpu"')) and "bench.gpu_burn.sdc" in rows and "bench.gpu_burn.errors" in rows' "burn: a row per GPU, SDC and errors rows"
check c_burn 'all(r["status"] == "PASS" for k, r in rows.items() if k.startswith("bench.gpu_burn"))' "burn 30 s runs clean"
rc=0
CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 120 $py -m verify.bench.gpu_engine --mode burn --burn-seconds 10 --burn-check-s 3 \
  >"$work/engine_burn.stdout" 2>"$work/engine_burn.stderr" || rc=$?  # shown; the c_burn checks judge the burn
note "== engine --mode burn 10 s: exit $rc"
cp "$work/engine_burn.stdout" "$work/fixtures/gpu_burn_$tag.stdout"

# (d) side by side
sendrecv=()
if [ "$ngpu" -ge 2 ] && [ -f .carry/nccl-tests/Makefile ]; then
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1) || true  # none: the default below
  cuda_home=$(dirname "$(dirname "${nvcc:-/usr/local/cuda/bin/nvcc}")")
  make -C .carry/nccl-tests -j 16 MPI=0 CUDA_HOME="$cuda_home" NCCL_HOME=/usr BUILDDIR="$work/nccl-tests-build" \
    >"$work/nccl-tests-build.log" 2>&1 || true  # a failed build leaves no binary: said below
  if [ -x "$work/nccl-tests-build/sendrecv_perf" ]; then sendrecv=(--sendrecv "$work/nccl-tests-build/sendrecv_perf"); fi
fi
if [ ${#sendrecv[@]} -eq 0 ]; then note "side by side: no sendrecv_perf (needs 2 GPUs and .carry/nccl-tests)"; fi
note "== d_side_by_side"
CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 400 $py benchmarks/gpu_engines_side_by_side.py "${sendrecv[@]}" \
  --json "$work/side_by_side.json" 2>"$work/side_by_side.stderr" | tee -a "$summary" \
  || note "CHECK FAIL gpu_engines_side_by_side.py exit $? (side_by_side.stderr)"
rm -rf "$work/nccl-tests-build"/*.o
