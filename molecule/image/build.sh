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

# What the roles and the testinfra checks call inside the node: ip/ethtool (network),
# sysctl/ps (procps), losetup/runuser (util-linux is essential), udevadm (storage rules),
# modprobe (kmod), pam_limits (libpam-modules is required priority, so always there).
packages="python3,systemd,systemd-sysv,dbus,iproute2,procps,kmod,udev,ethtool,util-linux"

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

# Scenarios run in parallel with the fleet scenario: one build, the others wait for it.
lock="${XDG_RUNTIME_DIR:-/tmp}/tunefleet-molecule-image.lock"
exec 9>"$lock"
flock 9

if ! $force && podman image exists "$image"; then
    echo "molecule image: $image already built"
    exit 0
fi

rootfs="$(mktemp -d "${TMPDIR:-/tmp}/tunefleet-rootfs.XXXXXX")"
trap 'rm -rf "$rootfs"' EXIT

echo "molecule image: debootstrap $suite into $rootfs"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" >"$rootfs.log" 2>&1 || {
    tail -n 30 "$rootfs.log" >&2
    echo "molecule image: debootstrap failed (full log: $rootfs.log)" >&2
    exit 1
}
rm -f "$rootfs.log"

# A container boots faster and touches less of the host without these: no consoles to spawn,
# no timers that run apt, and a machine-id left empty so each container gets its own.
for unit in getty@tty1.service console-getty.service apt-daily.timer apt-daily-upgrade.timer \
    e2scrub_all.timer fstrim.timer systemd-remount-fs.service; do
    ln -sfn /dev/null "$rootfs/etc/systemd/system/$unit"
done
: >"$rootfs/etc/machine-id"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

echo "molecule image: importing as $image"
tar -C "$rootfs" -c . | podman import --quiet \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'ENV container=podman' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    - "$image" >/dev/null
echo "molecule image: $image built"
