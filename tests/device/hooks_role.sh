#!/usr/bin/env bash
# roles/scheduler_hooks on a GPU node whose tunefleet interpreter is a venv's (issue 39): the role installs into a
# staging root (scheduler_hooks_root) with this checkout as the package, the installed Slurm hook then runs the
# prolog through the installed launcher (-I -S, only the import directories the role found): GPU facts must
# come from NVML (pynvml imported from the venv's site-packages without site), nothing is drained.
#
#   bash tests/device/hooks_role.sh      # .whl/ (ansible-core and its needs, collections.tar.gz) carried in
set -euo pipefail
. "$(dirname "$0")/lib.sh"
device_workdir hooks-role
ansible_env || exit 3
root=$work/node
mkdir -p "$root"
rc=0
python3 "$site/bin/ansible-playbook" -i localhost, -c local playbooks/scheduler_hooks.yml -e "{\"scheduler_hooks_root\": \"$root\",
  \"scheduler_hooks_python\": \"$(command -v python3)\", \"scheduler_hooks_package_dir\": \"$PWD/verify\",
  \"ansible_python_interpreter\": \"$(command -v python3)\"}" >"$work/install.log" 2>&1 || rc=$?
note "== install: ansible-playbook exit $rc; $(grep -E '^localhost +:' "$work/install.log" || true)"
[ "$rc" -eq 0 ] || { tail -30 "$work/install.log" | tee -a "$summary"; pack hooks_role; exit 1; }
launcher=$root/usr/local/libexec/tunefleet/tunefleet-check
note "== launcher: $(head -1 "$launcher"); $(grep -c . "$launcher") lines"
grep -E '^TUNEFLEET=' "$root/etc/default/tunefleet" | tee -a "$summary"
rc=0
env -i PATH=/usr/bin:/bin TUNEFLEET_NO_DEFAULTS=1 TUNEFLEET="$launcher" SLURMD_NODENAME=gpunode \
  TUNEFLEET_CHECK_ARGS="--spec $root/etc/tunefleet/desired_state.json --state-dir=$work/state --textfile-dir=$work/metrics --no-drain --report $work/prolog.json" \
  "$root/usr/local/libexec/tunefleet/tunefleet-prolog" >"$work/prolog.log" 2>&1 || rc=$?
note "== installed prolog hook through the launcher: exit $rc"
tee -a "$summary" <"$work/prolog.log"
$py - "$work/prolog.json" <<'PY' | tee -a "$summary"
import json, sys
report = json.load(open(sys.argv[1]))
run = report["run"]
print("gpu facts from:", run.get("gpu_source"), "| kernel log:", run.get("kernel_log"))
print("CHECK", "PASS" if run.get("gpu_source") == "nvml" else "FAIL", "the launcher's prolog read NVML (pynvml without site)")
for r in report["results"]:
    print(f"   {r['status']:5} {r['check_id']}: {r['reason'][:160]}")
PY
pack hooks_role
