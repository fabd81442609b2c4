#!/usr/bin/env bash
# One pass over everything the GPU machine can measure for tunefleet's benchmarks, with the raw
# outputs kept for tests/fixtures/bench and tests/fixtures/node/gpu_machine.
#
#   bash benchmarks/gpu_machine_run.sh OUTDIR [ALL_REDUCE_PERF]
#
# ALL_REDUCE_PERF is an nccl-tests binary the caller built (nccl-tests is the user's install on a
# real node; this script neither fetches nor builds it). NVLink multicast stays off throughout:
# on shared multi-GPU hosts a multicast job can take the GPUs out of service.
#
# Every step must work except those that may end non-zero on purpose, each marked where it runs:
# the node-fact probes (a tool or file this machine lacks: the error is the record), the benchmarks
# (a FAIL verdict is a result: the exit status goes to steps.log), cuFile (needs GDS).
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

out=${1:?usage: gpu_machine_run.sh OUTDIR [ALL_REDUCE_PERF]}
arp=${2:-}
mkdir -p "$out/node" "$out/raw" "$out/results"
py=python3
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$out/steps.log"; }
# measure NAME CMD...: run a benchmark; a non-zero exit (a FAIL verdict, a missing engine) is logged in
# steps.log, not fatal (only there: the caller's redirections hold the engine's raw output, kept as fixtures).
measure() {
  local name=$1 rc=0; shift
  "$@" || rc=$?
  echo "   $name: exit $rc" >>"$out/steps.log"
}

step "node facts"
# Probes: what this machine lacks (NVLink, cuda.bindings, GDS, cufile.json) is recorded as its error.
nvidia-smi -q >"$out/node/nvidia-smi-q.txt" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,persistence_mode,pci.bus_id --format=csv >"$out/node/nvidia-smi-query-gpu.csv" 2>&1 || true
nvidia-smi topo -m >"$out/node/nvidia-smi-topo-m.txt" 2>&1 || true
nvidia-smi nvlink --status >"$out/node/nvidia-smi-nvlink-status.txt" 2>&1 || true
$py -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version()); print("gpus", torch.cuda.device_count())' >"$out/node/versions.txt" 2>&1 || true
$py -c 'import cuda.bindings, cuda.bindings.cufile as c; print("cuda.bindings", cuda.bindings.__version__); print("cufile", c.get_version())' >>"$out/node/versions.txt" 2>&1 || true
ls /proc/driver/nvidia-fs >>"$out/node/versions.txt" 2>&1 || true
cat /etc/cufile.json >"$out/node/cufile.json" 2>&1 || true
ngpu=$($py -c 'import torch; print(torch.cuda.device_count())')
torch_nccl_lib=$($py -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null || true)
echo "torch NCCL lib dir: $torch_nccl_lib" >>"$out/node/versions.txt"

nccl_args=(--gpus "$ngpu" --min-bytes 8M --max-bytes 4G --iters 20 --warmup 5 --tries 1 --save-raw "$out/raw" --timeout-s 300)
for round in 1 2; do
  if [ -n "$arp" ]; then
    step "round $round: nccl-tests all_reduce_perf, system NCCL"
    measure "nccl-tests, system NCCL" \
      $py -m verify bench nccl --engine nccl-tests --binary "$arp" "${nccl_args[@]}" --json "$out/results/nccltests_system_$round.json"
    if [ -n "$torch_nccl_lib" ] && [ -d "$torch_nccl_lib" ]; then
      step "round $round: nccl-tests all_reduce_perf on the NCCL that torch loads"
      measure "nccl-tests, torch's NCCL" env LD_LIBRARY_PATH="$torch_nccl_lib:${LD_LIBRARY_PATH:-}" \
        $py -m verify bench nccl --engine nccl-tests --binary "$arp" "${nccl_args[@]}" --json "$out/results/nccltests_torchnccl_$round.json"
    fi
  fi
  step "round $round: built-in torch.distributed engine"
  measure "torch engine" $py -m verify bench nccl --engine torch "${nccl_args[@]}" --json "$out/results/torch_$round.json"
done

if [ -n "$arp" ]; then
  step "fidelity: built-in engine / all_reduce_perf on the same NCCL"
  for round in 1 2; do
    ref="$out/results/nccltests_torchnccl_$round.json"; [ -f "$ref" ] || ref="$out/results/nccltests_system_$round.json"
    measure "fidelity round $round" $py benchmarks/nccl_fidelity.py "$ref" "$out/results/torch_$round.json" 2>&1 \
      | tee -a "$out/steps.log"
  done
fi

step "host<->device copies (engine raw output, then the check)"
measure "hostcopy engine" $py -m verify.bench.torch_hostcopy --size-bytes 1G --iters 10 \
  >"$out/raw/hostcopy.stdout" 2>"$out/raw/hostcopy.stderr"
measure "hostcopy check" $py -m verify bench hostcopy --tries 1 --json "$out/results/hostcopy.json"

step "storage: 4 GiB file, cuFile and O_DIRECT (QD1 and QD4)"
# A fresh mktemp directory (0700, ours): the file measured is the one made here, never one that
# already sat at a fixed name (another user's, or a link to a device).
scratch_dir=$(mktemp -d /var/tmp/tunefleet-gpu-run.XXXXXX)
trap 'rm -rf -- "$scratch_dir"' EXIT
scratch=$scratch_dir/read.bin
# Made here, by us (--create-bytes writes it new, O_EXCL|O_NOFOLLOW): must work, or nothing below has a
# file to read.
$py -m verify.bench.odirect_read --file "$scratch" --create-bytes 4G --repeat 0 >/dev/null
df -h /var/tmp >"$out/node/df-var-tmp.txt" 2>&1 || true
findmnt -T /var/tmp >>"$out/node/df-var-tmp.txt" 2>&1 || true
measure "cuFile read (needs GDS)" $py -m verify.bench.cufile_read --file "$scratch" --repeat 2 \
  >"$out/raw/cufile.stdout" 2>"$out/raw/cufile.stderr"
measure "O_DIRECT QD1" $py -m verify.bench.odirect_read --file "$scratch" --repeat 2 \
  >"$out/raw/odirect_qd1.stdout" 2>"$out/raw/odirect_qd1.stderr"
measure "O_DIRECT QD4" $py -m verify.bench.odirect_read --file "$scratch" --repeat 2 --queue-depth 4 \
  >"$out/raw/odirect_qd4.stdout" 2>"$out/raw/odirect_qd4.stderr"
measure "storage check" $py -m verify bench storage --file "$scratch" --tries 1 --json "$out/results/storage.json"
rm -rf "$scratch_dir"
step "done"
