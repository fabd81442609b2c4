#!/usr/bin/env bash
# Build the molecule base image once per machine: a systemd-capable Debian with python3.
# No image registry is reachable from CI, so the image is made locally with debootstrap and
# `podman import`. With a registry, set TUNEFLEET_MOLECULE_IMAGE to any systemd image that has
# python3 (Ubuntu 22.04/24.04, Rocky 9) and this script only checks that it is present.
#
# usage: molecule/image/build.sh [--force]
set -euo pipefail

readonly default_image="localhost/tunefleet-debian:bookworm"
image="${TUNEFLEET_MOLECULE_IMAGE:-$default_image}"
suite="${TUNEFLEET_MOLECULE_SUITE:-bookworm}"
force=false
[ "${1:-}" = "--force" ] && force=true

# What the roles and the testinfra checks call inside the node: sudo (site.yml uses become),
# ip/ethtool (network),
# sysctl/ps (procps), losetup/runuser (util-linux is essential), udevadm (storage rules),
# modprobe (kmod), pam_limits (libpam-modules is required priority, so always there).
packages="python3,sudo,systemd,systemd-sysv,dbus,iproute2,procps,kmod,udev,ethtool,util-linux"

if [ "$image" != "$default_image" ]; then
    if podman image exists "$image"; then
        echo "molecule image: using $image (TUNEFLEET_MOLECULE_IMAGE)"
        exit 0
    fi
    echo "molecule image: $image (TUNEFLEET_MOLECULE_IMAGE) is not present; pull it first" >&2
    exit 1
fi

if [ "$(id -u)" != 0 ]; then
    echo "molecule image: building $image needs root (debootstrap and rootful podman)" >&2
    exit 1
fi

# Scenarios run in parallel with the fleet scenario: one build, the others wait for it. The lock
# lives in /run, which only root can write (we are root, checked above): a fixed name in /tmp
# could be another user's symlink, and root would truncate what it points at.
lock=/run/tunefleet-molecule-image.lock
exec 9>>"$lock"
flock 9

# Bump when the recipe below changes, so every machine rebuilds its cached image once.
readonly recipe=3
if ! $force && podman image exists "$image" \
    && [ "$(podman image inspect --format '{{ index .Labels "tunefleet.image-recipe" }}' "$image")" = "$recipe" ]; then
    echo "molecule image: $image already built"
    exit 0
fi

rootfs="$(mktemp -d "${TMPDIR:-/tmp}/tunefleet-rootfs.XXXXXX")"
buildlog="$(mktemp "${TMPDIR:-/tmp}/tunefleet-rootfs-log.XXXXXX")"  # made by mktemp, never a guessable name
trap 'rm -rf "$rootfs"' EXIT

echo "molecule image: debootstrap $suite into $rootfs"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" >"$buildlog" 2>&1 || {
    tail -n 30 "$buildlog" >&2
    echo "molecule image: debootstrap failed (full log: $buildlog)" >&2
    exit 1
}
rm -f "$buildlog"

# A privileged container shares /proc/sys and /sys with the CI machine, so its boot must not
# apply anything host-wide: the udev coldplug would run every vendor rule against the host's
# devices, and the vendor sysctl.d files set host-wide keys (fs.protected_*). Masking the
# files (a /dev/null link of the same name) keeps systemd-sysctl itself, which the scenarios
# use to prove the roles' own drop-ins persist. Also masked: consoles, apt timers.
for unit in systemd-udev-trigger.service getty@tty1.service console-getty.service apt-daily.timer \
    apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer systemd-remount-fs.service; do
    ln -sfn /dev/null "$rootfs/etc/systemd/system/$unit"
done
for vendor in "$rootfs"/usr/lib/sysctl.d/*.conf "$rootfs"/lib/sysctl.d/*.conf; do
    if [ -e "$vendor" ]; then ln -sfn /dev/null "$rootfs/etc/sysctl.d/$(basename "$vendor")"; fi
done
# An empty machine-id: each container gets its own.
: >"$rootfs/etc/machine-id"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

echo "molecule image: importing as $image"
tar -C "$rootfs" -c . | podman import --quiet \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'ENV container=podman' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL tunefleet.image-recipe=$recipe" \
    - "$image" >/dev/null
echo "molecule image: $image built"
