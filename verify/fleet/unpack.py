"""Every node's report archive of a fleet run unpacked on the controller in one process.

Each node sends one archive, <run>/<host>/reports.tar.gz (verify.noderun.archive_reports: its report
files, flat). Unpacking it with one Ansible task per host cost the controller a fork and a module run
per host (benchmarks/fleet_controller_cost.py); playbooks/verify.yml runs this once, before the fleet
report, instead.

The archive comes from a node, and the controller runs as root. A node's archive is evidence about that node,
never about the controller's verdicts: only the names noderun writes are taken (NODE_FILES, one per report
format; a crossnode-*.json, which the controller writes into the same directory, or any other name is left out and
named), as regular files, each
written through verify.safe_io into the host's directory (private, never through a link). Nothing is expanded
before it is bounded: the gzip stream is inflated to at most MAX_STREAM_BYTES and MAX_RATIO times its own size,
and the tar headers are walked here (not by tarfile, which reads a pax or long-name header of any size into
memory): each header's checksum, type, size, name and pax records are checked before its bytes are taken.
Anything else refuses the archive whole, before the first write, and costs that host only: "host X: its report
archive is damaged: why", kept in <run>/unpack/refused.json, which the fleet report lists, and the host, left
without a report, is named for the re-run (verify.fleet.rerun).

The nodes' play also keeps cross-node records per host as facts (roles/verify_node/tasks/rdma.yml) and the
fleet report play writes them all in one file, <run>/crossnode-records.json ({"crossnode-NAME.json": {host:
records, or [] for none}}): written here into each host's directory that exists, after the unpack.

    python3 -m verify.fleet.unpack RUN_DIR
"""
from __future__ import annotations

import json
import os
import re
import sys
import zlib
from typing import Optional, Sequence

from verify.bounded_load import MAX_BYTES as MAX_REPORT_BYTES
from verify.bounded_load import BoundedLoadError, load_json_bounded
from verify.report import WRITERS
from verify.safe_io import (
    PRIVATE_FILE,
    SHARED_FILE,
    for_terminal,
    is_plain_component,
    open_trusted_dir,
    read_capped,
    write_file_atomic,
    write_in_dir,
)

ARCHIVE = "reports.tar.gz"
NODE_FILES = frozenset(name for _module, name in WRITERS.values())  # what noderun packs: one file per format
NODE_REPORT = WRITERS["json"][1]  # an archive without it carries no report
MAX_MEMBERS = 16  # noderun packs len(NODE_FILES); the rest of the room is for names left out
MAX_MEMBER_BYTES = MAX_REPORT_BYTES  # one report file, as the fleet report reads it; ~100 KB a format
MAX_BYTES = 64 << 20        # all members together, unpacked
# The archive as fetched (roles/verify_node/vars/main.yml __verify_node_max_archive_bytes is the same figure: the
# node's archive is measured there before it is fetched).
MAX_ARCHIVE_BYTES = 32 << 20
BLOCK = 512
MAX_PAX_BYTES = 4096         # one member's pax records: tarfile writes its mtime there, a long name at most
# Headers, pax records and the end-of-archive padding besides the members' bytes.
MAX_STREAM_BYTES = MAX_BYTES + (2 * MAX_MEMBERS + 2) * BLOCK + MAX_MEMBERS * MAX_PAX_BYTES + 20 * BLOCK
# A report compresses about 10:1 (JSON, Markdown); gzip's own limit is about 1032:1. Below RATIO_FROM bytes the
# tar's zero padding (10 KiB an archive) compresses far better than that and costs nothing.
MAX_RATIO = 200
RATIO_FROM = 1 << 20
# The pax keys tarfile writes for a regular file; "size" or a sparse map would change where the next header is.
PAX_KEYS = frozenset({"path", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname", "hdrcharset", "comment"})
REGULAR = (b"0", b"\0")
USTAR_MAGIC = (b"ustar\x0000", b"ustar  \x00")  # POSIX (tarfile's pax and ustar formats), GNU
REFUSED_DIR = "unpack"  # never at the run's top: the fleet report reads <run>/*.json as host reports
REFUSED_NAME = "refused.json"
RECORDS = "crossnode-records.json"
RECORD_NAME = re.compile(r"crossnode-[a-z0-9-]{1,40}\.json")  # what the fleet report reads (crossnode-*.json)
MAX_RECORDS_BYTES = 256 << 20  # every host's records of a 10,000-node run


class UnpackError(ValueError):
    """A node's archive holds something noderun never writes, or is damaged; the message says why."""


def inflate(data: bytes) -> bytes:
    """The tar inside a gzip file, never more than MAX_STREAM_BYTES nor MAX_RATIO times the file's size."""
    limit = min(MAX_STREAM_BYTES, max(RATIO_FROM, MAX_RATIO * len(data)))
    out = bytearray()
    rest = data
    try:
        while rest:  # gzip members one after another are one stream (gzip's own rule)
            stream = zlib.decompressobj(wbits=31)
            pending = rest
            while pending and not stream.eof:
                out += stream.decompress(pending, limit + 1 - len(out))
                if len(out) > limit:
                    raise UnpackError(f"inflates past {limit} bytes ({len(data)} bytes compressed; at most "
                                      f"{MAX_STREAM_BYTES} bytes, {MAX_RATIO}:1)")
                pending = stream.unconsumed_tail
            if not stream.eof:
                raise UnpackError("the gzip stream is cut short")
            rest = stream.unused_data
    except zlib.error as exc:
        raise UnpackError(f"not a readable gzip stream ({exc})") from None
    return bytes(out)


def _number(field: bytes, what: str) -> int:
    """A tar header's octal field: ASCII digits 0-7, NUL or space padded; a base-256 (binary) field is refused:
    noderun never writes one, and it is how a negative size is spelled."""
    text = field.rstrip(b"\0 ").lstrip(b" ")
    if not text:
        return 0
    if not re.fullmatch(rb"[0-7]{1,12}", text):
        raise UnpackError(f"header field {what} is not an octal number ({bytes(field[:12])!r})")
    return int(text, 8)


def _pax_records(body: bytes) -> dict:
    """The "LEN key=value\n" records of a pax header (POSIX pax, ustar extended header), each checked."""
    records: dict = {}
    at = 0
    while at < len(body):
        if body[at:] == bytes(len(body) - at):
            break  # trailing NULs
        space = body.find(b" ", at, at + 8)
        length_text = body[at:space] if space > at else b""
        if not re.fullmatch(rb"[0-9]{1,4}", length_text):
            raise UnpackError("a pax record has no length")
        length = int(length_text)
        record = body[at:at + length]
        if length <= len(length_text) + 1 or at + length > len(body) or not record.endswith(b"\n") \
                or b"=" not in record:
            raise UnpackError("a pax record is damaged")
        key, _, value = record[space - at + 1:-1].partition(b"=")
        try:
            name, text = key.decode("ascii"), value.decode("utf-8")
        except UnicodeDecodeError:
            raise UnpackError("a pax record is not text") from None
        if name not in PAX_KEYS:
            raise UnpackError(f"a pax record sets {name[:40]!r}, which noderun never writes")
        records[name] = text
        at += length
    return records


def _name(header: bytes, pax: dict) -> str:
    if "path" in pax:
        return pax["path"]
    name, prefix = header[:100].split(b"\0", 1)[0], header[345:500].split(b"\0", 1)[0]
    text = (prefix + b"/" + name) if prefix else name
    return text.decode("utf-8", errors="replace")


def walk_tar(raw: bytes) -> tuple:
    """([(name, bytes)] of the report files, [other names]) of an uncompressed tar, each header checked before its
    bytes are taken. A regular file under another name (a crossnode-*.json: the controller's verdicts are its own)
    is left out and named; UnpackError for anything else noderun never writes (a link, a directory, a second copy,
    a damaged header, too many or too large members)."""
    members: list = []
    foreign: list = []
    seen: set = set()
    total = 0
    pax: Optional[dict] = None
    offset = 0
    while True:
        header = raw[offset:offset + BLOCK]
        if len(header) < BLOCK:
            raise UnpackError("the tar ends before its end-of-archive block")
        if header == bytes(BLOCK):
            break
        stored = _number(header[148:156], "chksum")
        if stored != sum(header[:148]) + 8 * 32 + sum(header[156:]):
            raise UnpackError(f"header at byte {offset} has a wrong checksum")
        if header[257:265] not in USTAR_MAGIC:
            raise UnpackError(f"header at byte {offset} is not a ustar header")
        kind, size = header[156:157], _number(header[124:136], "size")
        start = offset + BLOCK
        offset = start + -(-size // BLOCK) * BLOCK
        if kind == b"x":
            if pax is not None or size > MAX_PAX_BYTES:
                raise UnpackError(f"a pax header of {size} bytes (at most one of {MAX_PAX_BYTES} a member)")
            if start + size > len(raw):
                raise UnpackError("the tar is cut short inside a pax header")
            pax = _pax_records(raw[start:start + size])
            continue
        name = _name(header, pax or {})
        pax = None
        shown = repr(name[:80]) + ("..." if len(name) > 80 else "")
        if kind not in REGULAR:
            raise UnpackError(f"member {shown} is not a regular file (tar type {kind!r})")
        if len(seen) + len(foreign) == MAX_MEMBERS:
            raise UnpackError(f"more than {MAX_MEMBERS} members")
        if name in seen:
            raise UnpackError(f"member {shown} appears twice")
        if size > MAX_MEMBER_BYTES:
            raise UnpackError(f"member {shown} is {size} bytes (at most {MAX_MEMBER_BYTES})")
        total += size
        if total > MAX_BYTES:
            raise UnpackError(f"more than {MAX_BYTES} bytes unpacked")
        if start + size > len(raw):
            raise UnpackError(f"the tar is cut short inside member {shown}")
        if name in NODE_FILES:
            seen.add(name)
            members.append((name, raw[start:start + size]))
        else:
            foreign.append(name[:120])
    if pax is not None:
        raise UnpackError("a pax header is followed by no member")
    if NODE_REPORT not in seen:
        raise UnpackError(f"it holds no {NODE_REPORT}")
    return members, foreign


def read_members(archive: str) -> tuple:
    """([(name, bytes)] of the archive's report files, [names left out]); UnpackError (why) for a damaged or
    hostile archive, OSError when the file itself cannot be read (a link, not a regular file, too large)."""
    return walk_tar(inflate(read_capped(archive, MAX_ARCHIVE_BYTES)))  # not followed through a link


def unpack_host(host_dir: str) -> list:
    """Unpack <host_dir>/reports.tar.gz into host_dir; the names left out (not report files noderun writes)."""
    members, foreign = read_members(os.path.join(host_dir, ARCHIVE))  # all checked before the first write
    dir_fd = open_trusted_dir(host_dir)
    try:
        for name, content in members:
            write_in_dir(dir_fd, name, content, PRIVATE_FILE)
    finally:
        os.close(dir_fd)
    return foreign


def damaged_line(host: str, why: str) -> str:
    """The one wording of a refused archive, in the play's output and the fleet report."""
    return f"host {host}: its report archive is damaged: {why}"


def foreign_line(host: str, names: list) -> str:
    """The one wording of files an archive carried that the node never writes (its reports were taken)."""
    return (f"host {host}: its report archive also carried {', '.join(repr(n) for n in names[:MAX_MEMBERS])}, "
            "which a node never writes: left out")


def unpack_run(run_dir: str) -> tuple:
    """(hosts unpacked, {host: why refused}, {host: [names left out]}). Hosts without an archive (lost, or never
    run) are left alone: verify.fleet.rerun names them, as it names every host refused here (no report)."""
    done = 0
    refused: dict = {}
    left_out: dict = {}
    dir_fd = open_trusted_dir(run_dir)
    try:
        names = sorted(os.listdir(dir_fd))
    finally:
        os.close(dir_fd)
    for host in names:
        host_dir = os.path.join(run_dir, host)
        if not is_plain_component(host) or not os.path.lexists(os.path.join(host_dir, ARCHIVE)):
            continue
        try:
            foreign = unpack_host(host_dir)
            done += 1
            if foreign:
                left_out[host] = foreign
        except UnpackError as exc:
            refused[host] = str(exc)
        except OSError as exc:  # a link, not a regular file, too large, a directory we cannot use
            refused[host] = f"not read: {(exc.strerror or str(exc))[:300]}"
    return done, refused, left_out


def write_refused(run_dir: str, refused: dict, left_out: dict) -> None:
    """<run>/unpack/refused.json ({"hosts": {host: why}, "left_out": {host: [names]}}), which the fleet report
    lists; no file when every archive was taken whole."""
    if refused or left_out:
        write_file_atomic(os.path.join(run_dir, REFUSED_DIR, REFUSED_NAME),
                          json.dumps({"hosts": refused, "left_out": left_out}, indent=1, sort_keys=True),
                          PRIVATE_FILE, create_dir=True)


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
            try:  # a host's directory that cannot be used costs that host's records only
                dir_fd = open_trusted_dir(host_dir)
                try:
                    write_in_dir(dir_fd, name, json.dumps(records, indent=4), SHARED_FILE)
                finally:
                    os.close(dir_fd)
            except OSError as exc:
                refused.append(f"{RECORDS}: {name} not written for {host}: {(exc.strerror or str(exc))[:200]}")
                continue
            written += 1
    return written, refused


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python3 -m verify.fleet.unpack RUN_DIR", file=sys.stderr)
        return 2
    try:
        done, refused, left_out = unpack_run(args[0])
    except OSError as exc:  # the run directory itself: nothing of the run can be unpacked
        print(f"verify.fleet.unpack: {args[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    lines = [damaged_line(host, why) for host, why in sorted(refused.items())]
    lines += [foreign_line(host, names) for host, names in sorted(left_out.items())]
    try:
        write_refused(args[0], refused, left_out)
    except OSError as exc:
        lines.append(f"{REFUSED_DIR}/{REFUSED_NAME} not written (the fleet report will not list these hosts): "
                     f"{exc.strerror or exc}")
    records, not_written = write_records(args[0])
    for line in lines + not_written:
        print(for_terminal(line))  # member names and hosts come from the nodes
    print(f"reports unpacked for {done} host(s)" + (f", refused for {len(refused)}" if refused else "")
          + (f"; {records} cross-node record file(s) written" if records else ""))
    return 0

if __name__ == "__main__":
    sys.exit(main())
