"""Every node's report archive of a fleet run unpacked on the controller in one process.

Each node sends one archive, <run>/<host>/reports.tar.gz (verify.noderun.archive_reports: its report
files, flat). Unpacking it with one Ansible task per host cost the controller a fork and a module run
per host (benchmarks/fleet_controller_cost.py); playbooks/verify.yml runs this once, before the fleet
report, instead.

The archive comes from a node, and the controller runs as root: only what noderun writes is taken
(regular files with a plain name, not hidden, at most MAX_MEMBERS of them, MAX_BYTES in all), each
written through verify.safe_io into the host's directory (private, never through a link); an archive
holding anything else is refused whole, naming the host and the member, and that host has no report.

The nodes' play also keeps cross-node records per host as facts (roles/verify_node/tasks/rdma.yml) and the
fleet report play writes them all in one file, <run>/crossnode-records.json ({"crossnode-NAME.json": {host:
records, or [] for none}}): written here into each host's directory that exists, as a copy task per host did.

    python3 -m verify.fleet.unpack RUN_DIR
"""
from __future__ import annotations

import io
import json
import os
import re
import sys
import tarfile
import zlib
from typing import Optional, Sequence

from verify.bounded_load import BoundedLoadError, load_json_bounded
from verify.safe_io import (
    PRIVATE_FILE,
    SHARED_FILE,
    UnsafePathError,
    is_plain_component,
    open_trusted_dir,
    read_capped,
    write_in_dir,
)

ARCHIVE = "reports.tar.gz"
MAX_MEMBERS = 64            # noderun writes one file per format (json, md, junit, prom, html): a handful
MAX_BYTES = 64 << 20        # all members together, unpacked; a node report is ~100 KB a format
MAX_ARCHIVE_BYTES = 32 << 20
RECORDS = "crossnode-records.json"
RECORD_NAME = re.compile(r"crossnode-[a-z0-9-]{1,40}\.json")  # what the fleet report reads (crossnode-*.json)
MAX_RECORDS_BYTES = 256 << 20  # every host's records of a 10,000-node run


class UnpackError(ValueError):
    """A node's archive holds something noderun never writes; the message names the archive and why."""


def read_members(archive: str) -> list:
    """[(name, bytes)] of the archive's plain regular files; UnpackError for anything else."""
    members = []
    total = 0
    try:
        data = read_capped(archive, MAX_ARCHIVE_BYTES)  # a regular file, not followed through a link
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                if len(members) == MAX_MEMBERS:
                    raise UnpackError(f"{archive}: more than {MAX_MEMBERS} members")
                if not member.isreg() or not is_plain_component(member.name) or member.name.startswith("."):
                    raise UnpackError(f"{archive}: member {member.name!r} is not a plain regular file")
                total += member.size
                if total > MAX_BYTES:
                    raise UnpackError(f"{archive}: more than {MAX_BYTES} bytes unpacked")
                handle = tar.extractfile(member)
                members.append((member.name, handle.read(member.size) if handle else b""))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:  # zlib.error: a damaged stream mid-member
        raise UnpackError(f"{archive}: not a readable tar.gz ({exc})") from None
    return members


def unpack_host(host_dir: str) -> int:
    """Unpack <host_dir>/reports.tar.gz into host_dir; the number of files written."""
    members = read_members(os.path.join(host_dir, ARCHIVE))  # all checked before the first write
    dir_fd = open_trusted_dir(host_dir)
    try:
        for name, content in members:
            write_in_dir(dir_fd, name, content, PRIVATE_FILE)
    finally:
        os.close(dir_fd)
    return len(members)


def unpack_run(run_dir: str) -> tuple:
    """(hosts unpacked, one line per host refused). Hosts without an archive (lost, or never run) are
    left alone: verify.fleet.rerun names them."""
    done = 0
    refused = []
    dir_fd = open_trusted_dir(run_dir)
    try:
        names = sorted(os.listdir(dir_fd))
    finally:
        os.close(dir_fd)
    for host in names:
        host_dir = os.path.join(run_dir, host)
        if not is_plain_component(host) or not os.path.isfile(os.path.join(host_dir, ARCHIVE)):
            continue
        try:
            unpack_host(host_dir)
            done += 1
        except (UnpackError, UnsafePathError) as exc:
            refused.append(f"{host}: reports not unpacked: {exc}")
    return done, refused


def write_records(run_dir: str) -> tuple:
    """(files written, one line per entry refused) from <run>/crossnode-records.json, when the play wrote one.
    A host without a directory in the run (it never reported) gets none: verify.fleet.rerun names it."""
    path = os.path.join(run_dir, RECORDS)
    if not os.path.isfile(path):
        return 0, []
    try:
        data = load_json_bounded(path, MAX_RECORDS_BYTES, what="cross-node records")
    except (BoundedLoadError, OSError) as exc:
        return 0, [f"{RECORDS}: not read: {exc}"]
    if not isinstance(data, dict):
        return 0, [f"{RECORDS}: not a mapping of file names to hosts"]
    written = 0
    refused = []
    for name, by_host in sorted(data.items()):
        if not RECORD_NAME.fullmatch(name) or not isinstance(by_host, dict):
            refused.append(f"{RECORDS}: {name!r} is not a crossnode-NAME.json mapped to hosts")
            continue
        for host, records in sorted(by_host.items()):
            host_dir = os.path.join(run_dir, host)
            if not records or not is_plain_component(host) or not os.path.isdir(host_dir):
                continue
            dir_fd = open_trusted_dir(host_dir)
            try:
                write_in_dir(dir_fd, name, json.dumps(records, indent=4), SHARED_FILE)
            finally:
                os.close(dir_fd)
            written += 1
    return written, refused


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python3 -m verify.fleet.unpack RUN_DIR", file=sys.stderr)
        return 2
    done, refused = unpack_run(args[0])
    records, not_written = write_records(args[0])
    refused += not_written
    for line in refused:
        print(line)
    print(f"reports unpacked for {done} host(s)" + (f", refused for {len(refused)}" if refused else "")
          + (f"; {records} cross-node record file(s) written" if records else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
