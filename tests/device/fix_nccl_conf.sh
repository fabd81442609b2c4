#!/usr/bin/env bash
# From finding to fix on a GPU node (issue 49): a wrong /etc/nccl.conf line is planted, `tunefleet verify --local`
# finds it, `tunefleet fix RUN_DIR` plans the gpu role (check mode with diff), `tunefleet fix RUN_DIR --apply`
# applies it with connection local and verifies again; the before/after rows are printed.
#   1 GPU: the all-reduce needs 2 ranks (SKIP), so the line is found by gpu.nccl_conf (a key the desired state
#          does not set: WARN, remedy role gpu, which rewrites the file from gpu_nccl_conf);
#   2+ GPUs: also by the all-reduce's cause finder (busbw low because NCCL_P2P_DISABLE=1 (/etc/nccl.conf line 2):
#          FAIL, cause class nccl-setting, remedy role gpu), run with --bench nccl.
# The node is left as it was: /etc/nccl.conf and the ledger are copied first and put back on exit, whatever
# happens (the EXIT trap), or removed where they did not exist.
#
#   bash tests/device/fix_nccl_conf.sh
# .whl/ carried in: ansible-core and its pure-Python needs, collections.tar.gz (as for gpu_node_apply.sh), and
# ansible-runner with its needs (ansible_runner, pexpect, ptyprocess, python_daemon, lockfile, packaging).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir fix-nccl
unset NCCL_CONF_FILE  # NCCL and the cause finder read /etc/nccl.conf
conf=/etc/nccl.conf
ledger=/var/lib/tunefleet/ledger.json

keep() {  # keep PATH NAME: a copy of PATH in $work, or a marker that it did not exist
  if [ -e "$1" ]; then cp -a "$1" "$work/$2.orig"; else : >"$work/$2.absent"; fi
}
put_back() {  # put_back PATH NAME
  if [ -e "$work/$2.orig" ]; then cp -a "$work/$2.orig" "$1"; elif [ -e "$work/$2.absent" ]; then rm -f "$1"; fi
}
restore() {
  local rc=$?
  put_back "$conf" nccl.conf
  put_back "$ledger" ledger.json
  rm -rf "${venv:-$work/venv}"  # not packed: the wheels came in with the checkout
  note "== restored $conf ($(if [ -e "$conf" ]; then md5sum <"$conf" | cut -c1-8; else echo absent; fi)) and the ledger"
  pack fix_nccl_conf || true
  exit "$rc"
}
keep "$conf" nccl.conf
keep "$ledger" ledger.json
trap restore EXIT

# tunefleet fix runs ansible-playbook through ansible-runner from its own interpreter's directory: a venv that
# holds the carried wheels and sees the node's torch (a .pth line to its site-packages: engines need it).
venv=$work/venv
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl || exit 3
torch_site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null || true)
if [ -n "$torch_site" ]; then
  echo "$torch_site" >"$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/node-torch.pth"
fi
"$venv/bin/python" -c 'import ansible_runner, ansible' || { note "ansible-runner or ansible-core missing from .whl/"; exit 3; }
mkdir -p .cache/collections/ansible_collections/tunefleet  # the project's ansible.cfg reads ./.cache/collections
tar -C .cache/collections/ansible_collections -xzf .whl/collections.tar.gz
ln -sfn "$PWD" .cache/collections/ansible_collections/tunefleet/gpu_node
py=$venv/bin/python

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
cat >"$work/vars.yml" <<'EOF'
network_interfaces: []
storage_device_patterns: ["vd*", "nvme*n*"]
storage_allow_no_match: true
memory_hugepages_2m: 0
gpu_rdma_expected: false
gpu_nccl_conf:
  NCCL_DEBUG: WARN
gpu_nccl_conf_path: /etc/nccl.conf
# The gpu role then owns only nccl.conf here: persistence mode and nvidia_peermem are left as the node has them.
gpu_persistence_mode: false
gpu_nvidia_peermem: false
EOF
if [ "${gpus:-0}" -ge 2 ]; then bench=(--bench nccl); else bench=(--no-bench); fi
note "== $gpus GPU(s): verify ${bench[*]}"

# The planted line: the desired state's own content plus one line that turns NVLink/PCIe P2P off.
printf 'NCCL_DEBUG=WARN\nNCCL_P2P_DISABLE=1\n' >"$conf"
rows() {  # rows REPORT_DIR: the nccl.conf and all-reduce rows and their remedy
  "$py" - "$1/report.json" <<'PY' | tee -a "$summary"
import json, sys
report = json.load(open(sys.argv[1]))
for r in report["results"]:
    if r["check_id"] == "gpu.nccl_conf" or r["check_id"].startswith("bench.nccl_allreduce"):
        remedy = (r.get("details") or {}).get("remedy") or {}
        busbw = (r.get("details") or {}).get("busbw_gbps") or r.get("observed")
        print(f"   {r['status']:5} {r['check_id']}: {str(busbw)[:80]} | {r['reason'][:160]}")
        if remedy:
            print(f"         remedy: {remedy.get('kind')} {remedy.get('role', '')} {remedy.get('variables', '')} "
                  f"fixable={remedy.get('fixable')}")
PY
}
tf() { "$py" -m verify "$@"; }

rc=0; tf verify --local --vars "$work/vars.yml" "${bench[@]}" --out "$work/before" --format json,md \
  >"$work/before.log" 2>&1 || rc=$?
note "== verify before: exit $rc"; rows "$work/before"
# --roles gpu: this node's other findings (an untuned sysctl, limits) are listed, not applied: the device
# machine is someone's node, and the run must leave it as it found it (only nccl.conf and the ledger are put back).
rc=0; tf fix "$work/before" --roles gpu >"$work/check.log" 2>&1 || rc=$?
note "== fix (check mode): exit $rc"; tee -a "$summary" <"$work/check.log"
note "== $conf after check mode (must still hold the planted line): $(tr '\n' ' ' <"$conf")"
verdict() { if eval "$1"; then note "CHECK PASS $2"; else note "CHECK FAIL $2"; fi; }
verdict 'grep -q NCCL_P2P_DISABLE "$conf"' "check mode changed nothing"
verdict 'grep -q "would change: .*gpu [1-9]" "$work/check.log"' "check mode plans the gpu role and would change it"
rc=0; tf fix "$work/before" --roles gpu --apply >"$work/apply.log" 2>&1 || rc=$?
note "== fix --apply: exit $rc"; tee -a "$summary" <"$work/apply.log"
note "== $conf after the apply: $(tr '\n' ' ' <"$conf")"
verdict '! grep -q NCCL_P2P_DISABLE "$conf"' "the apply removed the planted line"
verdict 'grep -q "changed: .*gpu [1-9]" "$work/apply.log"' "the apply changed the gpu role on this host"
verdict 'grep -q "gpu.nccl_conf: \(WARN\|FAIL\) -> PASS" "$work/apply.log"' "gpu.nccl_conf PASSes after the fix"
if [ "${gpus:-0}" -ge 2 ]; then
  verdict 'grep -q "bench.nccl_allreduce.*-> PASS" "$work/apply.log"' "the all-reduce PASSes after the fix"
fi
after=$(ls -d "$work"/before-fix-*/after 2>/dev/null | head -1 || true)
if [ -n "$after" ]; then note "== verify after (the fix's own re-verify)"; rows "$after"; fi
rc=0; tf fix "$work/before" --roles gpu --apply --max-age 1s >"$work/old.log" 2>&1 || rc=$?
note "== fix of a run older than --max-age 1s: exit $rc (want 2): $(head -1 "$work/old.log")"
verdict '[ "$rc" = 2 ]' "a run older than --max-age is refused"
