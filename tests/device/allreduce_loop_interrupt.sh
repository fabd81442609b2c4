#!/usr/bin/env bash
# Issue 12 items 4 and 5 on a GPU machine with 2 or more GPUs (runs from this checkout, as root).
#
#   bash tests/device/allreduce_loop_interrupt.sh      # prints a summary; files under $OUT (or a mktemp dir)
#
# (a) the fleet all-reduce (verify.fleet.multinode, torchrun, one host, every GPU, NCCL) and the
#     one-node torch engine measure with the same loop (CUDA events): busbw at 1 GiB side by side,
#     the ratio should be within a few percent; the fleet verdict is judged against a profile's
#     inter-node floor (h200-sxm-8x: 345 GB/s) and says which profile.
# (b) Ctrl-C (SIGINT) 10 s into `tunefleet bench nccl --engine torch` (4 GiB sweep, 5 tries): exit 130,
#     no traceback, JSON with bench.nccl_allreduce ERROR "interrupted (SIGINT)", and no process
#     left on the GPUs (nvidia-smi --query-compute-apps) or running the engine.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir loop
gpus=$(nvidia-smi -L | wc -l)
echo "GPUs: $gpus"

# (a) one loop, two callers
# A free port, asked of the kernel (a fixed one may be another user's listener).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The launch and the engine exit non-zero on a FAIL verdict: the line below shows the status and the figures.
rc=0
python3 -m verify.fleet.multinode launch --backend nccl --nnodes 1 --node-rank 0 --nproc-per-node "$gpus" \
  --master-addr 127.0.0.1 --master-port "$port" --min-bytes 64M --max-bytes 1G --iters 20 --warmup 5 \
  --timeout-s 300 --profile h200-sxm-8x --result-file "$work/fleet-measurement.json" --out "$work/fleet.json" \
  >"$work/fleet.log" 2>&1 || rc=$?
echo "(a) fleet launch exit $rc: $(tail -1 "$work/fleet.log")"
rc=0
python3 -m verify bench nccl --engine torch --gpus "$gpus" --min-bytes 64M --max-bytes 1G --tries 1 \
  --json "$work/engine.json" >"$work/engine.log" 2>&1 || rc=$?
echo "(a) one-node torch engine exit $rc"
python3 - "$work/fleet.json" "$work/engine.json" <<'PY'
import json, sys
try:
    fleet = json.load(open(sys.argv[1]))[0]
    engine = json.load(open(sys.argv[2]))[0]
except (OSError, ValueError, IndexError) as exc:
    print(f"(a) no figures to compare: {exc}"); sys.exit(0)
f, e = fleet["observed"], engine["observed"]
print(f"(a) fleet busbw {f:.1f} GB/s ({fleet['details'].get('timing')}), engine busbw {e:.1f} GB/s,"
      f" ratio {f / e:.3f}; fleet verdict {fleet['status']} expected {fleet['expected']}"
      f" profile {fleet['details'].get('profile')}")
PY

# (b) Ctrl-C mid all-reduce
# One 4 GiB size, 2000 iterations (~25 s on 2x H200): the signal lands mid-measurement, not after it.
python3 -m verify bench nccl --engine torch --gpus "$gpus" --min-bytes 4G --max-bytes 4G --iters 2000 --tries 5 \
  --json "$work/int.json" >"$work/int.out" 2>"$work/int.err" &
pid=$!
sleep 12
# The run may have ended already (an early error): kill then fails, and the exit status below says so.
kill -INT "$pid" || true
rc=0
wait "$pid" || rc=$?  # 130 is the point of (b)
sleep 1
echo "(b) exit $rc (want 130); Traceback lines: $(grep -c Traceback "$work/int.err")"
python3 -c "import json,sys; [print('(b)', r['check_id'], r['status'], r['reason'][:100]) for r in json.load(open(sys.argv[1]))]" \
  "$work/int.json" || echo "(b) no JSON from the interrupted run"
echo "(b) GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
echo "(b) engine processes left: $(pgrep -fc 'verify.bench.torch_allreduce' || true)"
# One tarball: the device tool brings back only a few files.
tar -C "$work" -czf "$out/allreduce_loop_interrupt.tar.gz" .
echo "files: $out/allreduce_loop_interrupt.tar.gz"
