#!/usr/bin/env bash
# `make molecule`: build the base image once, run every scenario (or the ones named), time
# each, and prove the CI machine ends as it started (molecule/host_guard.sh). The containers are
# privileged and some kernel knobs are host-wide (vm.*, huge pages, THP, a loop device's queue):
# a scenario that forgot to put one back fails the run there even when all its own steps were green.
#
# usage: molecule/run.sh [SCENARIO...]     (run from anywhere; needs the project venv on PATH)
set -uo pipefail
cd "$(dirname "$0")/.."

export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/molecule/containers.conf}"
python="${PYTHON:-python3}"

if [ "$#" -gt 0 ]; then
    scenarios=("$@")
else
    mapfile -t scenarios < <(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' \
        | xargs -n1 basename | sort)
fi

if [ -z "${TUNEFLEET_MOLECULE_GUARDED:-}" ]; then
    molecule/image/build.sh || exit 1
    # A loop device left attached by an interrupted earlier run would keep its backing file alive.
    # The file lives in a container that may be gone, so match the name losetup remembers.
    losetup --list --noheadings --output NAME,BACK-FILE | awk '/tunefleet-molecule-loop\.img/ {print $1}' | while read -r dev; do
        echo "molecule: detaching $dev left over from an interrupted run (its queue settings are not known)"
        losetup --detach "$dev"
    done
    # The image is there now, so the guard can warm podman up before its snapshot.
    TUNEFLEET_MOLECULE_GUARDED=1 PYTHON="$python" exec molecule/host_guard.sh "$0" "${scenarios[@]}"
fi

failed=()
timings=()
total_start=$SECONDS
for scenario in "${scenarios[@]}"; do
    start=$SECONDS
    if ! molecule test --scenario-name "$scenario"; then
        failed+=("$scenario")
    fi
    timings+=("$scenario: $((SECONDS - start)) s")
done

echo "== molecule timings (total $((SECONDS - total_start)) s)"
printf '   %s\n' "${timings[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    printf 'molecule FAILED: %s\n' "${failed[@]}"
    exit 1
fi
echo "molecule: all scenarios green (the host guard compares the CI machine next)"
