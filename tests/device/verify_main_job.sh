#!/usr/bin/env bash
# verify's main job on a GPU machine (issue 12): `tunefleet verify --local` with no argument, then the
# faults it must catch, then the built-in all-reduce against nccl-tests through verify.
#
#   bash tests/device/verify_main_job.sh          # writes $OUT/verify_main_job.tar.gz (or a new mktemp dir)
#
# (a) `verify --local`, no argument: the quick set, timed (target <= 60 s on 2x H200)
# (b) the same with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: must FAIL naming the socket fallback (2+ GPUs)
# (c) the same with a pinned H2D copy loop on GPU 0 in the background: must FAIL bench.h2d.gpu0
# (d) `verify --local --bench nccl` with the nccl-tests engine and with the torch engine (2+ GPUs), the
#     busbw ratio at 1 GiB and 4 GiB (target >= 0.98). nccl-tests sources are carried in at
#     .carry/nccl-tests and built here (make MPI=0); without them (d) is skipped and says so.
# On a 1-GPU machine (b) and (d) are skipped; (a) must show the all-reduce SKIP "needs 2 ranks" and no
# figure above its link's peak. Runs verify from this checkout (no install): python3 -m verify.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir main-job
verify=($py -m verify verify --local --format json,md,html)
show='^benchmarks|^skipped|^profile|^hardware|^(PASS|WARN|FAIL|ERROR|SKIP) +bench'

{
  note "== machine"
  nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv 2>&1 | tee -a "$summary"
  # No torch is a finding to show (the GPU rows then say so), not a reason to stop.
  $py -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "nccl", torch.cuda.nccl.version())' 2>&1 | tee -a "$summary" || true
  $py -c 'import yaml, jinja2' 2>/dev/null || note "WARNING: PyYAML or jinja2 missing: verify cannot render the desired state"
} 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || true  # grep -c: 0 and exit 1 when none
note "GPUs: $ngpu"

# (a) the main command, no argument
run_verify a_default
check a_default 'bench.get("selection") == "quick" and bench.get("wall_s", 1e9) <= 60' "quick set ran in <= 60 s"
check a_default 'all(r["status"] != "ERROR" for k, r in rows.items() if k.startswith("bench"))' "no benchmark ERROR"
check a_default '"storage" in bench.get("ran", []) and any(k.startswith("bench.storage.") and r["status"] == "PASS" for k, r in rows.items())' "storage measured"
check a_default '"bench.h2d.gpu0" in rows and all(r["status"] in ("PASS", "WARN") for k, r in rows.items() if k.startswith(("bench.h2d", "bench.d2h")))' "host copies measured"
if [ "$ngpu" -ge 2 ]; then
  check a_default 'rows["bench.nccl_allreduce"]["status"] == "PASS"' "all-reduce PASS"
  check a_default 'rows["bench.nccl_allreduce"]["observed"] <= rows["bench.nccl_allreduce"]["details"].get("physical_peak", {}).get("gbps", 0)' "all-reduce under its physical peak"
else
  check a_default 'rows["bench.nccl_allreduce"]["status"] == "SKIP" and "needs 2 ranks" in rows["bench.nccl_allreduce"]["reason"]' "1 GPU: all-reduce SKIP needs 2 ranks"
  run_verify a_bench_nccl_one_gpu --bench nccl
  check a_bench_nccl_one_gpu 'rows["bench.nccl_allreduce"]["status"] == "SKIP"' "1 GPU: --bench nccl is SKIP, never an impossible PASS"
fi

# (b) socket fallback
if [ "$ngpu" -ge 2 ]; then
  (export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1; run_verify b_socket)
  check b_socket 'rows["bench.nccl_allreduce"]["status"] == "FAIL" and "TCP sockets" in rows["bench.nccl_allreduce"]["reason"]' "P2P+SHM off: FAIL naming the socket fallback"
else
  note "== b_socket: skipped (needs 2 GPUs)"
fi

# (c) a competing pinned H2D copy loop on GPU 0
h2d_competitor
start_competitor 240 "competing copy"
run_verify c_competing_copy
stop_competitor
check c_competing_copy 'rows["bench.h2d.gpu0"]["status"] == "FAIL"' "competing copy: bench.h2d.gpu0 FAIL"
if [ "$ngpu" -ge 2 ]; then
  check c_competing_copy 'rows["bench.h2d.gpu1"]["status"] in ("PASS", "WARN")' "competing copy: bench.h2d.gpu1 unaffected"
fi

# (d) fidelity through verify: the same sweep (the profile's, to 4 GiB) with both engines
if [ "$ngpu" -ge 2 ] && [ -f .carry/nccl-tests/Makefile ]; then
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1) || true  # none: the default below
  cuda_home=$(dirname "$(dirname "${nvcc:-/usr/local/cuda/bin/nvcc}")")
  nccl_home=/usr
  if [ ! -f /usr/include/nccl.h ]; then
    # find meets unreadable directories (exit 1) on its way: the first header found is what counts.
    header=$(find / -name nccl.h -path '*include*' 2>/dev/null | head -1) || true
    nccl_home=$(dirname "$(dirname "${header:-/usr/include/nccl.h}")")
  fi
  note "== building nccl-tests: CUDA_HOME=$cuda_home NCCL_HOME=$nccl_home"
  make -C .carry/nccl-tests -j 16 MPI=0 CUDA_HOME="$cuda_home" NCCL_HOME="$nccl_home" \
    BUILDDIR="$work/nccl-tests-build" >"$work/nccl-tests-build.log" 2>&1 || true  # no binary: said below
  arp=$work/nccl-tests-build/all_reduce_perf
  if [ -x "$arp" ]; then
    engine_vars() { printf '{"verify_bench_options": {"nccl": %s}}\n' "$1" >"$work/$2.json"; }
    engine_vars "{\"engine\": \"nccl-tests\", \"binary\": \"$arp\", \"tries\": 1}" d_nccltests
    engine_vars '{"engine": "torch", "tries": 1}' d_torch
    run_verify d_nccltests --bench nccl --vars "$work/d_nccltests.json"
    # torch without the nvidia-nccl wheel: no second run on its NCCL.
    torch_nccl_lib=$($py -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null) || true
    if [ -n "$torch_nccl_lib" ] && [ -d "$torch_nccl_lib" ]; then
      # the same NCCL as the torch engine loads, so the two engines differ only in their loop
      (export LD_LIBRARY_PATH="$torch_nccl_lib:${LD_LIBRARY_PATH:-}"
       run_verify d_nccltests_torchnccl --bench nccl --vars "$work/d_nccltests.json")
    fi
    run_verify d_torch --bench nccl --vars "$work/d_torch.json"
    for ref in d_nccltests d_nccltests_torchnccl; do
      [ -f "$work/$ref/report.json" ] || continue
      $py - "$work/$ref/report.json" "$work/d_torch/report.json" "$ref" <<'PY' | tee -a "$summary" \
        || note "CHECK FAIL fidelity vs $ref: no curves to compare (a report or its all-reduce row is missing)"
import json, sys
def curve(path):
    rows = {r["check_id"]: r for r in json.load(open(path))["results"]}
    row = rows["bench.nccl_allreduce"]
    return row["details"].get("engine"), {p["size_bytes"]: p["busbw_gbps"] for p in row["details"].get("curve", [])}
ref_engine, ref = curve(sys.argv[1])
our_engine, ours = curve(sys.argv[2])
for size in (1 << 30, 4 << 30):
    if size in ref and size in ours:
        ratio = ours[size] / ref[size]
        verdict = "PASS" if ratio >= 0.98 else "FAIL"
        print(f"CHECK {verdict} fidelity vs {sys.argv[3]} ({ref_engine}) at {size >> 30} GiB: "
              f"torch {ours[size]:.1f} / nccl-tests {ref[size]:.1f} GB/s = {ratio:.3f} (>= 0.98)")
    else:
        print(f"CHECK FAIL fidelity at {size >> 30} GiB: missing from a curve ({sorted(ref)[-1:]}, {sorted(ours)[-1:]})")
PY
    done
  else
    note "== d_fidelity: nccl-tests did not build (see nccl-tests-build.log)"
    tail -20 "$work/nccl-tests-build.log" | tee -a "$summary"
  fi
else
  note "== d_fidelity: skipped (needs 2 GPUs and .carry/nccl-tests)"
fi

rm -rf "$work/nccl-tests-build"
pack verify_main_job
