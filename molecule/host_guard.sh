#!/usr/bin/env bash
# Run a command and fail if it left the CI machine's host-wide state changed: sysctls outside
# the network namespace, huge pages, THP, IRQ affinity, CPU governors, and the queue settings
# (scheduler, read_ahead_kb, ...) of every block device, host loop devices included. `make test`
# runs both pytest and molecule under it: the containers are privileged and tests attach host
# loop devices, so a test that forgets to put something back fails here even when it passed.
#
# usage: molecule/host_guard.sh COMMAND [ARG...]     (exit: COMMAND's status, or 1 on drift)
#
# The container engine changes host values by design the first time it runs, so the "before"
# snapshot is taken after podman has done that (a warm-up, below), not before: on a fresh
# machine a bridge network sets net.ipv4.ip_forward and conf.{all,default}.forwarding to 1 and
# conf.all.accept_redirects to 0, and systemd booting in a privileged container raises
# fs.file-max to 9223372036854775807. Whatever the command changes after that still counts.
set -uo pipefail
cd "$(dirname "$0")/.."

export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/molecule/containers.conf}"
python="${PYTHON:-python3}"
state="molecule/shared/files/node_state.py"
image="${TUNEFLEET_MOLECULE_IMAGE:-localhost/tunefleet-debian:bookworm}"
[ "$#" -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

# One privileged systemd container of the molecule image on podman's default bridge does both
# of podman's changes; ~3 s. Without podman or the image nothing here can start a container,
# so there is nothing to warm up (the container tests skip then).
warm_up_podman() {
    command -v podman >/dev/null && [ "$(id -u)" = 0 ] && podman image exists "$image" || return 0
    local name="tunefleet-host-guard-warmup-$$" status=""
    podman run -d --rm --name "$name" --privileged --systemd=always "$image" \
        "${TUNEFLEET_MOLECULE_INIT:-/sbin/init}" >/dev/null || return 1
    for _ in $(seq 60); do
        status="$(podman exec "$name" systemctl is-system-running 2>/dev/null)"
        case "$status" in running|degraded) break ;; esac
        sleep 1
    done
    podman rm --force --time 0 "$name" >/dev/null 2>&1
    case "$status" in running|degraded) return 0 ;; esac
    echo "host guard: the podman warm-up container did not finish booting ($status)" >&2
    return 1
}

# What tunefleet itself writes as root (the history database, the ledger, the reboot marker, acks, reports,
# and its owned drop-ins under /etc): a test that wrote there left the machine changed even when every
# kernel value is back. TUNEFLEET_GUARD_PATHS (space-separated) replaces the list: the guard's own test.
tunefleet_paths="${TUNEFLEET_GUARD_PATHS:-/var/lib/tunefleet /etc/tunefleet /run/tunefleet /var/log/tunefleet}"

# One line per entry under each path (type, mode, owner, size, content hash), and every /etc file whose
# name holds "tunefleet" (sysctl.d, limits.d, modules-load.d, udev rules, systemd drop-ins).
snapshot_tunefleet_paths() {
    local path
    for path in $tunefleet_paths; do
        if [ -e "$path" ] || [ -L "$path" ]; then
            find "$path" -printf '%p %y %m %u:%g %s\n' | sort
            find "$path" -type f -print0 | sort -z | xargs -0 -r sha256sum
        else
            echo "$path absent"
        fi
    done
    [ -n "${TUNEFLEET_GUARD_PATHS:-}" ] || find /etc -name '*tunefleet*' -printf '%p %y %m %s\n' 2>/dev/null | sort
}

warm_up_podman || exit 1
before="$(mktemp "${TMPDIR:-/tmp}/tunefleet-host-before.XXXXXX.json")"
paths_before="$(mktemp "${TMPDIR:-/tmp}/tunefleet-paths-before.XXXXXX.txt")"
trap 'rm -f "$before" "$paths_before"' EXIT
"$python" "$state" save "$before" --host >/dev/null || exit 1
snapshot_tunefleet_paths > "$paths_before"

"$@"
rc=$?

echo "== host guard: the CI machine's host-wide state against its snapshot from before: $*"
drift=()
# Only on a machine shared with other jobs that move host-wide knobs; CI leaves it unset.
[ -n "${TUNEFLEET_MOLECULE_ALLOW_HOST_DRIFT:-}" ] && drift=(--allow-drift "$TUNEFLEET_MOLECULE_ALLOW_HOST_DRIFT")
if ! "$python" "$state" compare "$before" "${drift[@]}"; then
    echo "host guard FAILED: '$*' left the CI machine changed (see the differences above)"
    [ "$rc" -eq 0 ] && rc=1
fi
echo "== host guard: tunefleet's own paths ($tunefleet_paths) against their snapshot from before"
if ! diff -u --label before --label after "$paths_before" <(snapshot_tunefleet_paths); then
    echo "host guard FAILED: '$*' wrote under tunefleet's own paths (see the differences above)"
    [ "$rc" -eq 0 ] && rc=1
fi
exit "$rc"
