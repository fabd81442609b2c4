#!/usr/bin/env bash
# Apply the roles for real on a GPU node with connection local, twice (the second run must
# report changed=0), verify before and after, then restore and verify the node is back.
# Expects .whl/ with ansible-core + its pure-Python needs and collections.tar.gz (carried in).
set -euo pipefail
# Runs as root: every scratch path is a fresh mktemp directory, never a fixed name in /tmp that
# another user could have made first (their site-packages would then run as root).
out=${OUT:-$(mktemp -d)}
log=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
device_env
ansible_env || exit 3
playbook=(python3 "$site/bin/ansible-playbook" -i inventory/local -e @tests/device/gpu_node_vars.yml)
verify=(python3 -m verify verify --local --vars tests/device/gpu_node_vars.yml --profile h200-x2-nvlink --no-bench)

# Each step's exit status is the record (verdict_drills.sh counts the rc=0 lines): a step that fails
# (verify with a FAIL, a play that fails) is shown, and the next step still runs.
step() {
  local rc=0
  echo "=== $1"; shift
  "$@" || rc=$?
  echo "=== rc=$rc"
}
{
  step "versions" python3 "$site/bin/ansible-playbook" --version
  step "snapshot before" python3 -m tests.helpers.snapshot "$log/gpu_h200" --spec tests/fixtures/node/gpu_machine_desired.json
  step "verify before" "${verify[@]}" --out "$log/before" --format json,md,junit,prom,html
  step "check mode" "${playbook[@]}" playbooks/site.yml --check --diff
  step "converge 1" "${playbook[@]}" playbooks/site.yml --diff
  step "converge 2 (idempotence)" "${playbook[@]}" playbooks/site.yml
  step "verify after" "${verify[@]}" --out "$log/after"
  step "ledger" cat /var/lib/tunefleet/ledger.json
  step "restore" "${playbook[@]}" playbooks/restore.yml --diff
  step "verify after restore" "${verify[@]}" --out "$log/restored"
} 2>&1 | tee "$log/apply.log"
mkdir -p "$out"
cp "$log/apply.log" "$out/"
# A step that failed may have left no report directory: pack those that exist.
packed=()
for dir in before after restored gpu_h200; do
  if [ -e "$log/$dir" ]; then packed+=("$dir"); fi
done
if [ ${#packed[@]} -gt 0 ]; then tar -C "$log" -czf "$out/reports.tar.gz" "${packed[@]}"; fi
grep -E '^=== |PLAY RECAP|changed=' "$log/apply.log"  # always matches: every step writes its === lines
