"""Storage read checks: gdsio (GPU direct vs CPU path) when installed, else cuFile + O_DIRECT.

All reads hit one file. Without `--file` a scratch file is written and removed after (also when
interrupted), so the node is left as it was. Where it goes (`--dir`, else `scratch_parent`): the
data disk, i.e. the largest writable file system on a block device of storage_device_patterns
(the disks the storage role tunes; NVMe namespaces by default), their partitions or md/dm arrays
built on them, other than /; with none mounted, /var/tmp on the root disk. The report says which.

tunefleet runs as root on shared nodes, so the scratch file is never a fixed name in a directory
others can write: it lives in a fresh directory (random name, mode 0700, verify.safe_io) made in
a parent that only root can change (a sticky one such as /var/tmp included), and is created
O_CREAT|O_EXCL|O_NOFOLLOW. A parent another user could change is refused, naming it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from dataclasses import dataclass
from typing import Optional

from verify.bench.common import (
    Threshold,
    Try,
    broken_measurement,
    figure_text,
    human_bytes,
    judged,
    module_available,
    parse_size,
    payload_error,
    progress,
    recorded_only,
    result,
    tail,
    with_retries,
)
from verify.bench.cufile_read import PAYLOAD_SCHEMA as CUFILE_SCHEMA
from verify.bench.gds_parse import GdsParseError, parse_gdscheck, parse_gdsio
from verify.bench.odirect_read import PAYLOAD_SCHEMA as ODIRECT_SCHEMA
from verify.engine import CANNOT_RUN, ENGINE_CWD, engine_argv, engine_env, read_result
from verify.facts.gpu_query import query_gpus
from verify.interrupt import deferred
from verify.judging import peaks, verdicts
from verify.payload_schema import checked_payload
from verify.profiles import bench_setting, resolve_threshold
from verify.result import Status
from verify.runner import which

REMEDIATION = "storage: storage_scheduler / storage_read_ahead_kb; check the device and filesystem"
GDS_REMEDIATION = "load nvidia-fs (or enable NVMe P2PDMA) and use an ext4/XFS mount GDS supports (gdscheck -p)"
DERIVED_GDS_RATIO = Threshold(
    limit=0.9,
    warn=1.0,
    source="derived: GPU-direct reads should not be slower than the CPU path on the same file (anchors_verify.md 4.6)",
)
SCRATCH_PREFIX = "tunefleet-storage-"
SCRATCH_NAME = "read.bin"  # inside the fresh 0700 directory, where no one else can plant anything
FALLBACK_DIR = "/var/tmp"  # no data disk mounted: the root disk's place for large temporary files
DEFAULT_PATTERNS = ("nvme*n*",)  # storage_device_patterns' default
SPARE_BYTES = 1 << 30  # never fill a node's disk to the brim for a benchmark
SCRATCH_REMEDIATION = "use --dir with a directory only root can change (or --file with an existing file)"


def free_bytes(directory: str):
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


@dataclass
class StorageOptions:
    file: Optional[str] = None
    dir: Optional[str] = None  # None: the data disk (scratch_parent)
    size_bytes: int = 4 << 30
    block_bytes: int = 1 << 20
    queue_depth: int = 1
    gpu: int = 0
    tries: int = 2
    timeout_s: float = 600.0
    engines: tuple = ("odirect", "cufile", "gdsio")


def options_from(profile: Optional[dict], overrides: Optional[dict] = None) -> StorageOptions:
    opts = StorageOptions(
        size_bytes=parse_size(bench_setting("storage_bytes", profile, 4 << 30)),
        queue_depth=int(bench_setting("storage_queue_depth", profile, 1)),
        tries=int(bench_setting("tries", profile, 2)),
    )
    for key, value in (overrides or {}).items():
        if value is not None:
            setattr(opts, key, value)
    return opts


def gdsio_argv(binary: str, opts: StorageOptions, path: str, xfer: int) -> list:
    # -I 0 sequential read, -x 0 GPU direct / -x 2 storage->CPU->GPU; same file, size, threads, IO size.
    return [
        binary,
        "-f",
        path,
        "-d",
        str(opts.gpu),
        "-w",
        str(opts.queue_depth),
        "-s",
        str(opts.size_bytes),
        "-i",
        f"{opts.block_bytes // 1024}K",
        "-x",
        str(xfer),
        "-I",
        "0",
    ]


# ---- the physical bound of a read: the link of the device the file lives on ----------------------
MAX_STACK_DEPTH = 4  # dm on md on nvme: a few layers at most


def _link_target(node, absolute: str) -> str:
    try:
        return os.readlink(node.path(absolute))
    except OSError:
        return ""


def whole_disk(node, name: str) -> str:
    """The disk a partition belongs to (nvme0n1p1 -> nvme0n1); a disk or md/dm device is itself."""
    for disk in node.listdir("/sys/block"):
        if name == disk or name in node.listdir(f"/sys/block/{disk}"):
            return disk
    return name


def _pcie_of(node, pci_dir: str, origin: str) -> Optional[peaks.Peak]:
    gen = peaks.pcie_gen_from_speed(node.read_value(f"{pci_dir}/max_link_speed"))
    width = node.read_value(f"{pci_dir}/max_link_width") or ""
    return peaks.pcie_peak([(gen, int(width) if width.isdigit() and len(width) <= 3 else None, origin)])


def device_bound(node, disk: str, depth: int = 0) -> Optional[peaks.Peak]:
    """The read bound of one block device from sysfs, None when its link cannot be read.

    NVMe: the PCIe link of its controller (/sys/block/<ns>/device is the controller, its `device`
    the PCI function with max_link_speed/width; native multipath lists each path's controller).
    SATA: 6 Gb/s. md/dm: the sum of its members (a RAID 0 reads from all at once).
    """
    members = node.listdir(f"/sys/block/{disk}/slaves")
    if members and depth < MAX_STACK_DEPTH:
        parts = [device_bound(node, whole_disk(node, m), depth + 1) for m in members]
        if any(p is None for p in parts):
            return None
        return peaks.summed_peak(parts, f"{disk} over {', '.join(members)}")
    if disk.startswith("nvme"):
        controllers = ["device"] + [f"multipath/{p}/device" for p in node.listdir(f"/sys/block/{disk}/multipath")]
        links = [_pcie_of(node, f"/sys/block/{disk}/{c}/device", f"{disk} controller max link, sysfs")
                 for c in controllers]
        links = [p for p in links if p is not None]
        if len(links) > 1:
            return peaks.summed_peak(links[1:], f"{disk} over {len(links) - 1} NVMe paths")
        return links[0] if links else None
    if "/ata" in _link_target(node, f"/sys/block/{disk}"):
        return peaks.sata_peak(disk)
    return None


def storage_bound(node, path: str) -> peaks.Peak:
    """What no read of `path` can exceed: its device's link, else the fastest storage link (virtio,
    SAS, NVMe over fabrics, network and memory file systems: no link sysfs describes)."""
    try:
        number = os.stat(path).st_dev
    except OSError:
        return peaks.unknown_storage_bound(f"{path} could not be read")
    name = node.readlink_name(f"/sys/dev/block/{os.major(number)}:{os.minor(number)}")
    if not name:
        return peaks.unknown_storage_bound(f"{path} is not on a block device")
    disk = whole_disk(node, name)
    found = device_bound(node, disk)
    if found is not None:
        return found
    kind = "virtio, no link" if "virtio" in _link_target(node, f"/sys/block/{disk}") else "link unknown"
    return peaks.unknown_storage_bound(f"{disk}: {kind}")


def judge_floor(check_id: str, label: str, gbps, threshold: Optional[Threshold], details: dict,
                bound: Optional[peaks.Peak] = None):
    """One engine's read rate against its floor, always bounded by the device's link: a rate that is
    not a number, negative, zero or above the link is ERROR, "recorded only" included."""
    bound = bound or peaks.unknown_storage_bound()
    shown = figure_text(gbps)
    observed = round(gbps, 3) if isinstance(gbps, float) and gbps == gbps and abs(gbps) != float("inf") else gbps
    if threshold is None:
        return recorded_only(check_id, gbps, f"{label} {shown} GB/s; no floor set (verify_thresholds)", observed,
                             details, bound, floor=0.0, floor_source="a read that moved nothing")
    details["threshold"] = threshold.to_dict()
    details["physical_peak"] = bound.to_dict()
    return judged(check_id, threshold, gbps, f"{label} {shown} GB/s", threshold.describe() + " GB/s",
                  observed, REMEDIATION, details, peak=bound.gbps, peak_source=bound.source, floor=0.0,
                  floor_source="a read that moved nothing")


def _engine_try(node, check_id: str, argv: list, timeout: float, label: str, judge, schema: dict) -> Try:
    out = node.run(argv, timeout_s=timeout, env=engine_env(), cwd=ENGINE_CWD)
    raw = {"argv": argv, "returncode": out.returncode, "stderr_tail": tail(out.stderr)}
    payload = read_result(out.stdout)
    if out.timed_out:
        return Try(
            result(
                check_id,
                Status.ERROR,
                f"{label} hung: killed after {timeout:.0f} s (partial output kept)",
                details={"partial_output": raw},
            )
        )
    if payload is None:
        last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        if out.returncode == CANNOT_RUN:
            return Try(result(check_id, Status.SKIP, f"{label} cannot run on this node: {last}",
                              details={"partial_output": raw}))
        return Try(result(check_id, Status.ERROR, f"{label} failed: {last}", details={"partial_output": raw}))
    payload, problems = checked_payload(payload, schema)
    if problems:  # one engine, one figure: a malformed result is this engine's ERROR, the others still run
        return Try(payload_error(check_id, label, problems, {"partial_output": raw}))
    judged = judge(payload)
    judged.details["run"] = raw
    return Try(judged, {"gbps": payload["gbps"]})


def run_odirect(spec, profile, node, opts: StorageOptions, path: str):
    threshold = resolve_threshold("storage_odirect_gbps", profile, spec)
    bound = storage_bound(node, path)
    argv = engine_argv(
        "verify.bench.odirect_read", ["--file", path, "--block", opts.block_bytes, "--queue-depth", opts.queue_depth]
    )

    def judge(payload):
        details = {
            "file": path,
            "block_bytes": opts.block_bytes,
            "queue_depth": opts.queue_depth,
            "runs": payload["runs"],
        }
        return judge_floor(
            "bench.storage.odirect",
            f"O_DIRECT {human_bytes(opts.block_bytes)} reads, QD{opts.queue_depth}:",
            payload["gbps"],
            threshold,
            details,
            bound,
        )

    return with_retries(
        lambda i: _engine_try(node, "bench.storage.odirect", argv, opts.timeout_s, "O_DIRECT read", judge,
                              ODIRECT_SCHEMA),
        opts.tries,
        "O_DIRECT read",
    )


def run_cufile(spec, profile, node, opts: StorageOptions, path: str, busy: Optional[list] = None):
    threshold = resolve_threshold("storage_cufile_gbps", profile, spec)
    gds_expected = bool((profile or {}).get("gds_expected", False))
    bound = storage_bound(node, path)
    hidden = ",".join(b.bus_id for b in busy or [])
    argv = engine_argv("verify.bench.cufile_read", ["--file", path, "--block", opts.block_bytes, "--gpu", opts.gpu,
                                                    *(["--exclude-bus-ids", hidden] if hidden else [])])

    def judge(payload):
        details = {k: v for k, v in payload.items() if k != "runs"}
        details["runs"] = payload["runs"]
        mode = payload.get("mode")
        judged = judge_floor(
            "bench.storage.cufile",
            f"cuFile reads into GPU {opts.gpu} ({mode} mode):",
            payload["gbps"],
            threshold,
            details,
            bound,
        )
        if judged.status == Status.ERROR:
            return judged  # a broken figure says so, whatever the mode
        if mode != "gds" and gds_expected:
            judged.status = Status.FAIL
            judged.reason = f"cuFile ran in {mode} mode (no nvidia-fs I/O): not GPUDirect, and the profile expects GDS"
            judged.remediation = GDS_REMEDIATION
        elif mode != "gds":
            judged.reason += " (compatibility mode: POSIX reads through a bounce buffer, not GPUDirect)"
        return judged

    outcome = with_retries(
        lambda i: _engine_try(node, "bench.storage.cufile", argv, opts.timeout_s, "cuFile read", judge,
                              CUFILE_SCHEMA),
        opts.tries,
        "cuFile read",
    )
    if outcome.status == Status.SKIP and gds_expected:
        # The profile promises GPUDirect Storage: a node where cuFile cannot even run fails it.
        outcome.status = Status.FAIL
        outcome.reason += " (the profile expects GPUDirect Storage)"
        outcome.remediation = GDS_REMEDIATION
    return outcome


def run_gdsio(spec, profile, node, opts: StorageOptions, path: str, binary: str) -> list:
    check = None
    gdscheck = which("gdscheck", getattr(node, "root", "/"))
    if gdscheck:
        out = node.run([gdscheck, "-p"], timeout_s=60)
        check = parse_gdscheck(out.stdout)
    measured = {}
    results = []
    bound = storage_bound(node, path)
    for xfer, name in ((0, "gpud"), (2, "cpu_gpu")):
        argv = gdsio_argv(binary, opts, path, xfer)
        out = node.run(argv, timeout_s=opts.timeout_s)
        check_id = f"bench.storage.gdsio.{name}"
        try:
            runs = parse_gdsio(out.stdout)
            broken = broken_measurement(runs[0].throughput_gbps, bound.gbps, bound.source, 0.0,
                                        "a read that moved nothing") if runs else None
        except GdsParseError as exc:
            runs, broken = [], str(exc)
        if out.timed_out or not runs or broken:
            why = "hung" if out.timed_out else (broken or f"exited {out.returncode} without a result line")
            results.append(
                result(
                    check_id,
                    Status.ERROR,
                    f"gdsio -x {xfer} {why}",
                    details={"argv": argv, "stdout_tail": tail(out.stdout), "stderr_tail": tail(out.stderr)},
                )
            )
            continue
        measured[name] = runs[0]
        results.append(recorded_only(check_id, runs[0].throughput_gbps,
                                     f"gdsio -x {xfer} ({runs[0].xfer_type}) {runs[0].throughput_gbps:.2f} GB/s",
                                     round(runs[0].throughput_gbps, 3), {"argv": argv, "run": runs[0].to_dict()},
                                     bound, 0.0, "a read that moved nothing"))
    if "gpud" in measured and measured.get("cpu_gpu") and measured["cpu_gpu"].throughput_gbps > 0:
        ratio_threshold = resolve_threshold("gds_vs_cpu_ratio", profile, spec, DERIVED_GDS_RATIO)
        ratio = measured["gpud"].throughput_gbps / measured["cpu_gpu"].throughput_gbps
        gpud = results[0]
        gpud.reason = gpud.reason.replace(": recorded only", "")  # the ratio below judges it
        gpud.details["gds_vs_cpu_ratio"] = round(ratio, 3)
        gpud.details["gdscheck"] = check.to_dict() if check else None
        if check is not None and not check.gds_possible:
            gpud.status = Status.WARN
            gpud.reason += "; gdscheck shows no nvidia-fs/P2PDMA path: this ran in compatibility mode, not GPUDirect"
            gpud.remediation = GDS_REMEDIATION
        else:
            status, why = ratio_threshold.judge(ratio)
            gpud.status = status
            gpud.expected = f"GPU direct / CPU path {ratio_threshold.describe()}"
            gpud.reason += f"; GPU direct / CPU path = {ratio:.2f}: {why}"
            gpud.remediation = GDS_REMEDIATION if status != Status.PASS else ""
    return results


def data_disk_mounts(node, spec: Optional[dict]) -> list:
    """Writable file systems on the data disks, one per device: [{"dir", "device", "fstype"}].

    Data disks are the block devices storage_device_patterns names (what the storage role tunes),
    their partitions, and md/dm devices built on them (a DGX's /raid); read from /sys/block and
    /proc/self/mountinfo under the node's root.
    """
    patterns = list(((spec or {}).get("storage") or {}).get("device_patterns") or DEFAULT_PATTERNS)
    blocks = node.listdir("/sys/block")
    disks = [d for d in blocks if any(fnmatch.fnmatch(d, str(p)) for p in patterns)]
    names = set(disks) | {p for d in disks for p in node.listdir(f"/sys/block/{d}") if p.startswith(d)}
    for _ in range(3):  # dm on md on nvme: a few layers at most
        names |= {b for b in blocks if set(node.listdir(f"/sys/block/{b}/slaves")) & names}
    mounts, devices = [], set()
    for line in (node.read("/proc/self/mountinfo") or "").splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 6:
            continue
        post = line.split(" - ", 1)[1].split()
        device = node.readlink_name(f"/sys/dev/block/{fields[2]}")
        options = fields[5].split(",")
        # root "/" only: a bind mount of a subdirectory is the same disk seen again
        if device not in names or device in devices or fields[3] != "/" or "ro" in options:
            continue
        devices.add(device)
        mounts.append({"dir": _unescape(fields[4]), "device": device, "fstype": post[0] if post else ""})
    return mounts


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def scratch_parent(node, spec: Optional[dict], opts: StorageOptions) -> tuple:
    """(directory for the scratch file, why that one): --dir, else the data disk with the most free
    space that only root can change, else /var/tmp."""
    if opts.dir:
        return opts.dir, "--dir"
    from verify.safe_io import check_dir_trusted

    mounts = [m for m in data_disk_mounts(node, spec) if m["dir"] != "/"]
    refused = []
    for mount in sorted(mounts, key=lambda m: -(free_bytes(m["dir"]) or 0)):
        try:
            check_dir_trusted(mount["dir"])
        except OSError as exc:
            refused.append(str(exc))
            continue
        return mount["dir"], f"data disk {mount['device']} ({mount['fstype']}) mounted at {mount['dir']}"
    why = "no data disk (storage_device_patterns) is mounted apart from /"
    if refused:
        why = "the data disks' mount points are not safe for root to write in (" + "; ".join(refused) + ")"
    return FALLBACK_DIR, f"{why}: {FALLBACK_DIR} on the root disk"


def run(spec: Optional[dict], profile: Optional[dict], node, overrides: Optional[dict] = None,
        session=None) -> list:
    """Read one file with each engine. overrides (the `tunefleet bench storage` options, or the
    default quick set): file, dir, size_bytes, queue_depth, engines, gpu, tries, timeout_s. `session`:
    the run's GPU engine session (verify.bench.engine_session), whose busy GPUs cuFile never touches."""
    opts = options_from(profile, overrides)
    busy = list(session.busy) if session is not None else []
    if opts.file:
        if not os.path.isfile(opts.file):
            return [result("bench.storage", Status.ERROR, f"--file {opts.file} does not exist")]
        # Engines start in / (never the caller's directory), so they get the absolute path.
        return measure(spec, profile, node, opts, os.path.abspath(opts.file), busy)
    parent, where = scratch_parent(node, spec, opts)
    room = free_bytes(parent)
    if room is None or room < opts.size_bytes + SPARE_BYTES:
        have = "unknown" if room is None else human_bytes(room)
        return [
            result(
                "bench.storage",
                Status.ERROR,
                f"{parent} has {have} free; the {human_bytes(opts.size_bytes)}"
                f" scratch file needs that plus {human_bytes(SPARE_BYTES)} spare (use --dir or --file)",
                details={"scratch_dir_chosen": where},
            )
        ]
    from verify.safe_io import make_unique_dir

    try:
        scratch = make_unique_dir(parent, SCRATCH_PREFIX)
    except OSError as exc:  # UnsafePathError included: the message names the directory and why
        return [result("bench.storage", Status.ERROR, f"refusing to write the scratch file: {exc}",
                       remediation=SCRATCH_REMEDIATION, details={"scratch_dir_chosen": where})]
    try:
        path = os.path.join(scratch, SCRATCH_NAME)
        progress(f"storage: writing a {human_bytes(opts.size_bytes)} scratch file {path} ({where})")
        out = node.run(
            engine_argv(
                "verify.bench.odirect_read", ["--file", path, "--create-bytes", opts.size_bytes, "--repeat", 0]
            ),
            timeout_s=opts.timeout_s,
            env=engine_env(),
            cwd=ENGINE_CWD,
        )
        if not out.ok:
            return [
                result(
                    "bench.storage",
                    Status.ERROR,
                    f"could not write the scratch file {path}: {out.stderr.strip()[-300:] or out.returncode}",
                )
            ]
        results = measure(spec, profile, node, opts, path, busy)
        for item in results:
            item.details["scratch_dir"] = parent
            item.details["scratch_dir_chosen"] = where
        return results
    finally:
        with deferred():  # a Ctrl-C here must not leave GiBs behind
            shutil.rmtree(scratch, ignore_errors=True)


def node_gpu_count(node) -> int:
    try:
        return len(query_gpus(node).gpus)
    except ValueError:
        return 0


def measure(spec: Optional[dict], profile: Optional[dict], node, opts: StorageOptions, path: str,
            busy: Optional[list] = None) -> list:
    """Every selected engine reads `path`: gdsio where installed, O_DIRECT, cuFile without gdsio. `busy`: GPUs
    another process holds (verify.bench.engine_session.BusyGpu), hidden from cuFile's engine."""
    busy = busy or []
    results = []
    root = getattr(node, "root", "/")
    gdsio = which("gdsio", root) if "gdsio" in opts.engines else None
    if gdsio:
        results.extend(run_gdsio(spec, profile, node, opts, path, gdsio))
    if "odirect" in opts.engines:
        results.append(run_odirect(spec, profile, node, opts, path))
    if "cufile" in opts.engines and not gdsio:
        if busy and node_gpu_count(node) - len(busy) <= 0:
            results.append(result("bench.storage.cufile", Status.ERROR, "cuFile read not run: every GPU is in use ("
                                  + "; ".join(b.describe() for b in busy) + ")",
                                  details={verdicts.ACTION_KEY: verdicts.APPLICATION}))
        elif module_available("cuda.bindings"):
            results.append(run_cufile(spec, profile, node, opts, path, busy))
        else:
            results.append(
                result(
                    "bench.storage.cufile",
                    Status.SKIP,
                    "neither gdsio nor cuda-python's cuFile binding is installed",
                )
            )
    return results
