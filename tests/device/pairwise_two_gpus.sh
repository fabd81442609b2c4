#!/usr/bin/env bash
# The cross-node path on real NCCL (issue 50): "nodes" of one GPU machine meet over NCCL's network transport.
# Each side of verify.fleet.nccl_pair runs with --one-machine (its own NCCL host by NCCL_HOSTID, NCCL's P2P,
# SHM and NVLS off) and --gpu N, over the rail `lo`, through the real launcher, torchrun, timing loop, parser
# of NCCL's output and judge; every record shows the transport NCCL reported.
#
#   bash tests/device/pairwise_two_gpus.sh        # repo root, as root
# .whl/ carried for part (e): ansible-core and its needs, collections.tar.gz and ansible-runner with its needs
# (as for tests/device/fix_nccl_conf.sh).
#
# Parts, each a CHECK line in the summary:
#   (a) the pair on GPU 0 and GPU 1 (on a 1-GPU machine both sides share GPU 0: NCCL accepts two ranks on one
#       GPU when their host ids differ), NCCL over lo: PASS, "NET/Socket over lo"
#   (b) the planted fault: the desired state expects RDMA (gpu_rdma_expected, as the 8-GPU profiles set it), NCCL
#       took sockets: FAIL, cause class nccl-socket-not-rdma, action fix-config; the same with --profile h100-sxm-8x
#   (c) TCP over lo measured with one stream (the interface's honest reference beside NCCL's socket figure)
#   (d) RDMA: rdma_rxe/siw and perftest probed; where a soft RDMA device comes up, the pair over NCCL's IB
#       transport on it and ib_write_bw between two processes, else SKIP with the reason
#   (f) the fleet all-reduce (verify.fleet.multinode) over every GPU as a node (2 or 4; on 1 GPU two nodes share
#       it), NCCL over lo, judged against the socket transport's bound (verify.judging.peaks.socket_transport_bound)
#   (e) `tunefleet verify -i` with two local hosts, each pinned to its GPU and to rail lo, the pairwise round on
# On 1 GPU every part runs with the "nodes" sharing GPU 0, then it says "needs 2 GPUs" and exits 0.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir pairwise-two-gpus
gpus=$($py -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
note "== $(date -u +%FT%TZ) GPUs: $gpus; torch $($py -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())' 2>&1 | tail -1)"
nvidia-smi -L 2>&1 | tee -a "$summary" || true
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
second=$(( gpus >= 2 ? 1 : 0 ))

# pair NAME RAIL GPU0 GPU1 [launch args...]: both sides at once; side 0's Outcome line, its records and both logs in $work.
pair() {
  local name=$1 rail=$2 g0=$3 g1=$4; shift 4
  local port start end rc0=0 rc1=0
  port=$(free_port)
  local common=(--a node-a --b node-b --rail "$rail" --master-addr 127.0.0.1 --master-port "$port" --backend nccl
                --one-machine --min-bytes 1M --max-bytes 256M --iters 10 --warmup 3 --timeout-s 240 "$@")
  start=$(date +%s.%N)
  $py -m verify.fleet.nccl_pair launch --side 0 --gpu "$g0" "${common[@]}" --result-file "$work/$name-m0" \
    --out "$work/$name-o0.json" >"$work/$name-side0.log" 2>&1 &
  local pid0=$!
  $py -m verify.fleet.nccl_pair launch --side 1 --gpu "$g1" "${common[@]}" --result-file "$work/$name-m1" \
    --out "$work/$name-o1.json" >"$work/$name-side1.log" 2>&1 || rc1=$?
  wait "$pid0" || rc0=$?
  end=$(date +%s.%N)
  note "== pair $name (rail $rail, GPUs $g0/$g1): exit $rc0/$rc1, $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s"
  tail -1 "$work/$name-side0.log" | tee -a "$summary"
}

# record NAME EXPR MESSAGE: judge side 0's first record (r) of pair NAME with a Python expression.
record() {
  $py - "$work/$1-o0.json" "$2" "$3" <<'PY' | tee -a "$summary"
import json, sys
path, expr, message = sys.argv[1:4]
try:
    r = json.load(open(path))[0]
except (OSError, ValueError, IndexError) as exc:
    print(f"CHECK FAIL {message}: no record ({exc})"); sys.exit(0)
t = (r.get("details") or {}).get("crossnode_transport") or {}
print(f"   {r['status']}: {r['reason'][:400]}")
if r["status"] == "ERROR":  # what the ranks printed last
    for line in str((r.get("details") or {}).get("output_tail") or "").splitlines()[-4:]:
        print(f"   ! {line[:300]}")
for line in t.get("lines", [])[:6]:
    print(f"   | {line}")
try:
    ok, why = bool(eval(expr, {"r": r, "t": t, "cause": (r.get("details") or {}).get("cause") or {}})), ""
except (KeyError, TypeError, ValueError) as exc:
    ok, why = False, f" ({type(exc).__name__}: {exc})"
print(f"CHECK {'PASS' if ok else 'FAIL'} {message}{why}")
PY
}

# (a) the pair over NCCL's socket transport on lo
pair socket lo 0 "$second"
record socket 'r["status"] == "PASS" and t["described"] == "NET/Socket over lo" and r["observed"] > 0' \
  "pair over NCCL's network transport on lo, NET/Socket over lo"

# (b) the planted fault: RDMA expected, sockets taken
echo '{"gpu": {"rdma_expected": true}}' >"$work/expects-rdma.json"
pair planted lo 0 "$second" --spec "$work/expects-rdma.json"
record planted 'r["status"] == "FAIL" and cause["class"] == "nccl-socket-not-rdma" and r["details"]["action"] == "fix-config"' \
  "desired state expects RDMA, NCCL took sockets: FAIL fix-config, cause nccl-socket-not-rdma"
pair planted-profile lo 0 "$second" --profile h100-sxm-8x
record planted-profile 'r["status"] == "FAIL" and cause["class"] == "nccl-socket-not-rdma"' \
  "profile h100-sxm-8x (gpu_rdma_expected) and sockets: FAIL with the transport named as the cause"

# (c) TCP over lo, one stream, 4 GiB: the interface's own figure beside NCCL's socket transport
$py - <<'PY' | tee -a "$summary"
import socket, threading, time
size, chunk = 4 << 30, 4 << 20
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
def sink():
    conn, _ = server.accept(); left = size; buf = bytearray(chunk); view = memoryview(buf)
    while left > 0:
        got = conn.recv_into(view, min(chunk, left)); left -= got
    conn.close()
reader = threading.Thread(target=sink); reader.start()
client = socket.create_connection(server.getsockname()); data = bytes(chunk)
start = time.perf_counter()
for _ in range(size // chunk):
    client.sendall(data)
client.close(); reader.join()
print(f"== TCP over lo, one stream, 4 GiB in 4 MiB sends: {size / (time.perf_counter() - start) / 1e9:.2f} GB/s")
PY

# (d) RDMA: a software RDMA device and perftest, where the kernel and the image have them
rdma_skip=""
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
  for module in rdma_rxe siw; do modprobe "$module" >"$work/modprobe-$module.log" 2>&1 && break || true; done
  netdev=$(ls /sys/class/net | grep -v '^lo$' | head -1 || true)
  if ! command -v rdma >/dev/null; then rdma_skip="no rdma tool (iproute2) to add a soft RDMA link"
  elif ! lsmod 2>/dev/null | grep -qE '^(rdma_rxe|siw) '; then
    rdma_skip="neither rdma_rxe nor siw loads: $(tail -1 "$work/modprobe-rdma_rxe.log" 2>/dev/null)"
  elif [ -z "$netdev" ]; then rdma_skip="no netdev besides lo to put a soft RDMA link on"
  else rdma link add tunefleet_rxe0 type rxe netdev "$netdev" >"$work/rdma-link.log" 2>&1 \
         || rdma_skip="rdma link add failed: $(tail -1 "$work/rdma-link.log")"
  fi
fi
hca=$(ls /sys/class/infiniband 2>/dev/null | head -1 || true)
if [ -z "$rdma_skip" ] && [ -n "$hca" ]; then
  note "== RDMA device $hca"
  pair ib "$hca" 0 "$second"
  record ib 't["plugin"] == "IB" and r["status"] in ("PASS", "WARN")' "pair over NCCL's IB transport on $hca"
  if command -v ib_write_bw >/dev/null; then
    ib_write_bw -d "$hca" -s 1048576 -n 200 --report_gbits >"$work/ib_write_bw-server.log" 2>&1 &
    server=$!; sleep 2
    rc=0; ib_write_bw -d "$hca" -s 1048576 -n 200 --report_gbits 127.0.0.1 >"$work/ib_write_bw-client.log" 2>&1 || rc=$?
    wait "$server" || true
    note "== ib_write_bw on $hca: exit $rc"; tail -4 "$work/ib_write_bw-client.log" | tee -a "$summary"
  else
    note "SKIP ib_write_bw: perftest is not installed on this machine"
  fi
else
  note "SKIP the IB transport and ib_write_bw: ${rdma_skip:-no RDMA device under /sys/class/infiniband}"
fi

# (f) the fleet all-reduce, every GPU a node (2 or 4); on 1 GPU two nodes share it (each its own NCCL host)
nodes=$(( gpus >= 4 ? 4 : 2 ))
port=$(free_port); pids=(); start=$(date +%s.%N)
for i in $(seq 0 $((nodes - 1))); do
  gpu=$(( gpus >= nodes ? i : 0 ))
  CUDA_VISIBLE_DEVICES=$gpu NCCL_HOSTID=tunefleet-node-$i NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 \
    $py -m verify.fleet.multinode launch --nnodes "$nodes" --node-rank "$i" --nproc-per-node 1 --master-addr 127.0.0.1 \
      --master-port "$port" --ifname lo --min-bytes 1M --max-bytes 256M --iters 10 --warmup 3 --timeout-s 300 \
      --result-file "$work/allreduce-m$i.json" --out "$work/allreduce-o$i.json" >"$work/allreduce-$i.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
note "== fleet all-reduce, $nodes nodes on $(( gpus >= nodes ? nodes : 1 )) GPU(s) over lo: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
tail -2 "$work/allreduce-0.log" | tee -a "$summary"
record allreduce 'r["status"] in ("PASS", "WARN") and t["described"] == "NET/Socket over lo" and "bound" in t' \
  "fleet all-reduce over $nodes nodes: NCCL over lo, judged against the socket transport's bound"


# (e) the fleet's pairwise round through `tunefleet verify -i`: two hosts on the local connection. tunefleet runs
# ansible through ansible-runner from its own interpreter: a venv with the carried wheels that sees the node's
# torch (as tests/device/fix_nccl_conf.sh builds it).
venv=$work/venv
if python3 -m venv "$venv" && "$venv/bin/python" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl \
    && "$venv/bin/python" -c 'import ansible_runner, ansible' 2>/dev/null; then
  torch_site=$($py -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  echo "$torch_site" >"$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/node-torch.pth"
  mkdir -p .cache/collections/ansible_collections/tunefleet  # the project's ansible.cfg reads ./.cache/collections
  tar -C .cache/collections/ansible_collections -xzf .whl/collections.tar.gz
  ln -sfn "$PWD" .cache/collections/ansible_collections/tunefleet/gpu_node
  cat >"$work/inventory.yml" <<EOF
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"  # the venv's, with the node's torch
    network_interfaces: [lo]
    verify_benchmarks: []
    verify_node_rdma_pairing: "off"
    verify_node_path_mtu: false
    verify_node_nccl_pairwise: quick
    verify_node_pairwise_rails: each
    verify_node_pairwise_one_machine: true
    verify_node_pairwise_max_bytes: 256M
    verify_node_pairwise_iters: 10
    verify_node_pairwise_timeout_s: 240
  hosts:
    node-a: {verify_node_pairwise_gpu: 0}
    node-b: {verify_node_pairwise_gpu: $second}
EOF
  rc=0; start=$(date +%s.%N)
  "$venv/bin/python" -m verify verify -i "$work/inventory.yml" --no-history --out "$work/fleet" >"$work/fleet.log" 2>&1 || rc=$?
  note "== tunefleet verify -i (two local hosts, GPUs 0 and $second, rail lo): exit $rc, $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  tail -8 "$work/fleet.log" | tee -a "$summary"
  $py - "$work/fleet" <<'PY' | tee -a "$summary"
import glob, json, sys
found = sorted(glob.glob(f"{sys.argv[1]}/**/nccl-pairs/round-1.json", recursive=True))
if not found:
    print("CHECK FAIL the pairwise round wrote no round-1.json"); sys.exit(0)
outcomes = json.load(open(found[0]))
for o in outcomes:
    print(f"   {o['a']} - {o['b']} {o['rail']}: {o['status']} {o.get('busbw_gbps')} GB/s {o.get('reason', '')[:200]}")
ok = any(o["status"] == "pass" and "NET/Socket over lo" in o.get("reason", "") for o in outcomes)
print(f"CHECK {'PASS' if ok else 'FAIL'} tunefleet verify -i: the pairwise round passed over NCCL's socket transport on lo")
PY
  rm -rf "$venv"  # not packed: the wheels came in with the checkout
else
  rm -rf "$venv"
  note "CHECK FAIL tunefleet verify -i not run: .whl/ must carry ansible-core, its needs, ansible-runner and collections.tar.gz"
fi

if [ "$gpus" -lt 2 ]; then
  note "needs 2 GPUs: every part above ran with its 'nodes' sharing GPU 0 ($gpus GPU here); a GPU per node needs a 2-GPU machine"
fi
pack pairwise_two_gpus
