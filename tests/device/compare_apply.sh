#!/usr/bin/env bash
# Issue 13's "done when", on a real GPU node: the roles of this checkout leave the node byte-identical
# to the roles of an earlier tree applied the same way, both restores bring back the node as found,
# a second apply changes nothing; then benchmarks/apply_vs_setup.py (check mode, and --apply: the
# re-applies that find nothing to do) against `ansible -m setup`, and a last restore.
#
#   tests/device/compare_apply.sh OLD_TREE   # as root from the repository root; .whl/ carried in
#
# OLD_TREE is the earlier version unpacked (git archive COMMIT | tar -x -C OLD_TREE). The node's state
# is molecule's node_state.py snapshot: kernel values, the block devices' queues, every file under /etc.
set -euo pipefail
old=${1:?usage: compare_apply.sh OLD_TREE}
old=$(cd "$old" && pwd)
. "$(dirname "$0")/lib.sh"
device_workdir compare-apply
ansible_env || exit 3
export PYTHONPATH=$site  # the playbooks' modules, not this checkout's verify, on the path
vars=$PWD/tests/device/gpu_node_vars.yml
state=(python3 "$PWD/molecule/shared/files/node_state.py")
blocks=()
for dev in /sys/block/vd*; do
  if [ -e "$dev" ]; then blocks+=(--block "$(basename "$dev")"); fi
done

# play TREE PLAYBOOK [ARGS]: that tree's playbook, with that tree as tunefleet.gpu_node; recap in the summary.
play() {
  local tree=$1 book=$2 rc=0; shift 2
  use_roles_from "$tree"
  # A failed play is recorded (exit, recap, its last lines) and the comparisons that follow judge it.
  (cd "$tree" && ANSIBLE_CONFIG=$tree/ansible.cfg python3 "$site/bin/ansible-playbook" -i inventory/local \
     -e @"$vars" "$book" "$@") >"$work/play.log" 2>&1 || rc=$?
  cat "$work/play.log" >>"$work/plays.log"
  note "== $(basename "$tree") $book $*: exit $rc; $(grep -E '^localhost +:' "$work/play.log" | tail -1 | tr -s ' ')"
  [ $rc -eq 0 ] || tail -20 "$work/play.log" | tee -a "$summary"
}
same() {  # same SNAPSHOT MESSAGE: the node against a saved snapshot
  if "${state[@]}" compare "$1" >"$work/compare.log" 2>&1; then note "CHECK PASS $2"
  else note "CHECK FAIL $2:"; tail -25 "$work/compare.log" | tee -a "$summary"; fi
}

"${state[@]}" save "$work/before.json" "${blocks[@]}" --files /etc | tee -a "$summary"
play "$old" playbooks/site.yml
"${state[@]}" save "$work/applied_old.json" --selection-from "$work/before.json" >/dev/null
cp /var/lib/tunefleet/ledger.json "$work/ledger_old.json" 2>/dev/null || true  # no ledger: nothing changed
play "$old" playbooks/restore.yml
same "$work/before.json" "the earlier roles' restore brings back the node as found"

play "$PWD" playbooks/site.yml --check
play "$PWD" playbooks/site.yml
same "$work/applied_old.json" "this checkout's roles leave the node as the earlier roles did"
cp /var/lib/tunefleet/ledger.json "$work/ledger_new.json" 2>/dev/null || true  # no ledger: nothing changed
play "$PWD" playbooks/site.yml
if grep -qE '^localhost +:.*changed=0 ' "$work/play.log"; then note "CHECK PASS second apply changed=0"
else note "CHECK FAIL second apply changed something"; fi
play "$PWD" playbooks/restore.yml
same "$work/before.json" "this checkout's restore brings back the node as found"

use_roles_from "$PWD"
for mode in "" --apply; do
  note "== benchmarks/apply_vs_setup.py --runs 3 $mode"
  python3 benchmarks/apply_vs_setup.py --runs 3 $mode -e @"$vars" --bin "$site/bin" 2>&1 | tee -a "$summary" \
    || note "CHECK FAIL benchmarks/apply_vs_setup.py $mode exit $?"
done
play "$PWD" playbooks/restore.yml
same "$work/before.json" "the node is as found at the end"
pack compare_apply
