#!/usr/bin/env bash
# Capture, on a GPU node, exactly what verify's hardware health checks read (verify/checks/health_*.py),
# then run those checks for real and time them. Everything lands under $OUT/health/ and is packed
# into ONE tarball, $OUT/health.tar.gz, to unpack as tests/fixtures/node/health/<machine kind>/.
#
#   OUT=/some/dir bash tests/device/capture_health.sh        (from the repository root, as root)
#
# Read-only: nothing on the node is changed; no load is put on the GPUs except `dcgmi diag -r 1`
# where DCGM is installed (about a minute; NO_DCGM=1 leaves it out).
set -euo pipefail
: "${OUT:?set OUT to the folder the capture goes to}"
cd "$(dirname "$0")/../.." || exit 1
dir="$OUT/health"
mkdir -p "$dir/cmd" "$dir/sysfs"
py=${PYTHON:-python3}

# One command: stdout, stderr and exit status kept apart, like verify.runner.run_command returns them.
# A tool that fails (no NVLink, no journal) is part of the capture: its status is kept, not fatal.
capture() {
  local name=$1 rc=0
  shift
  "$@" >"$dir/cmd/$name.stdout" 2>"$dir/cmd/$name.stderr" || rc=$?
  echo "$rc" >"$dir/cmd/$name.rc"
  printf '%s\n' "$*" >"$dir/cmd/$name.argv"
}

# verify's own field list, so the capture replays byte for byte in the tests.
mapfile -t query < <($py -c 'from verify.facts import health_smi; print("\n".join(health_smi.argv()))')
capture query-gpu "${query[@]}"
capture nvlink-s nvidia-smi nvlink -s
capture nvlink-e nvidia-smi nvlink -e
capture dmesg-kernel dmesg --kernel
# The printk level of the driver's lines (the Xid check reads the whole ring, not one level).
capture dmesg-nvrm-levels sh -c 'dmesg --kernel --decode | grep -i -e nvrm -e xid'
capture journalctl-k journalctl -k -b --no-pager -q
capture nvidia-smi-q nvidia-smi -q
# Topology (health_topology's fallback) and the DCGM benchmark's input, where dcgmi is installed
# (level 1 loads the GPUs for about a minute: skip it with NO_DCGM=1).
capture topo-m nvidia-smi topo -m
if command -v dcgmi >/dev/null 2>&1 && [ -z "${NO_DCGM:-}" ]; then
  capture dcgmi-diag-r1-j timeout 600 dcgmi diag -r 1 -j
fi
cat /proc/driver/nvidia/version >"$dir/proc_driver_nvidia_version.txt" 2>&1 || true  # the error is the record

# PCIe link files of every NVIDIA (0x10de) and Mellanox/NVIDIA networking (0x15b3) function and of
# the bridge above it: the files health_pcie.link_state reads.
for dev in /sys/bus/pci/devices/*; do
  vendor=$(cat "$dev/vendor" 2>/dev/null) || continue  # a function gone since the listing
  case "$vendor" in 0x10de | 0x15b3) ;; *) continue ;; esac
  real=$(readlink -f "$dev")
  for node in "$real" "$(dirname "$real")"; do
    name=$(basename "$node")
    if [ -e "$dir/sysfs/$name.txt" ]; then continue; fi
    {
      echo "path=$node"
      for f in vendor device class current_link_speed max_link_speed current_link_width max_link_width numa_node; do
        if [ -r "$node/$f" ]; then echo "$f=$(cat "$node/$f" 2>&1)"; fi
      done
    } >"$dir/sysfs/$name.txt"
  done
done

# RDMA ports: state, physical state, rate, link layer and the counters health_ib judges.
for port in /sys/class/infiniband/*/ports/*; do
  [ -d "$port" ] || continue
  name=$(echo "$port" | awk -F/ '{print $5 "_port" $7}')
  {
    for f in state phys_state rate link_layer; do echo "$f=$(cat "$port/$f" 2>&1)"; done
    for f in symbol_error link_downed port_rcv_errors link_error_recovery local_link_integrity_errors \
      excessive_buffer_overrun_errors; do
      echo "counters/$f=$(cat "$port/counters/$f" 2>&1)"
    done
  } >"$dir/sysfs/ib_$name.txt"
done
ls -la /sys/class/infiniband/ >"$dir/sysfs/infiniband_ls.txt" 2>&1 || true  # no RDMA: the error is the record
# HCA firmware, type and board (node facts: firmware, for the fleet's uniformity report).
for hca in /sys/class/infiniband/*; do
  [ -d "$hca" ] || continue
  { for f in fw_ver hca_type board_id; do echo "$f=$(cat "$hca/$f" 2>&1)"; done
    echo "device=$(readlink -f "$hca/device")"; } >"$dir/sysfs/ib_$(basename "$hca")_firmware.txt"
done

# The checks themselves, for real, with their timings (the config suite's budget is 0.5 s).
rc=0
$py - >"$dir/health_checks.json" 2>"$dir/health_checks.stderr" <<'EOF' || rc=$?  # kept in health_checks.rc
import json, time
from verify.checks import REGISTRY, run_checks
from verify.desired import render_spec
from verify.node import Node

names = [name for name in REGISTRY if name.startswith("health")]
runs = []
for profile in (None, "auto"):
    spec = render_spec({"verify_profile": profile} if profile else {}, hostname="capture")
    timings, start = {}, time.perf_counter()
    results = run_checks(spec, Node(), names=names, timings=timings)
    runs.append({"profile": profile, "total_s": round(time.perf_counter() - start, 4), "timings_s": timings,
                 "results": [r.to_dict() for r in results]})
print(json.dumps(runs, indent=1))
EOF
echo "$rc" >"$dir/health_checks.rc"
# The firmware facts the fleet's uniformity report compares (GPU VBIOS, HCA firmware); a failure is
# kept in firmware_facts.stderr, with the rest of the capture.
$py -c 'import json; from verify.facts.firmware import firmware_facts; from verify.node import Node
print(json.dumps(firmware_facts(Node()), indent=1))' >"$dir/firmware_facts.json" 2>"$dir/firmware_facts.stderr" || true

tar -C "$OUT" -czf "$OUT/health.tar.gz" health
echo "wrote $OUT/health.tar.gz"
