"""RDMA perftest per HCA: loopback on this node, or server on a peer and client here.

The server runs in a thread through the same runner as the client, with a longer timeout, so
a client that fails leaves no server behind: the runner kills the server's process group when
its timeout passes (on a peer, `timeout` bounds the remote server the same way).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Optional

from verify.bench.common import (
    Threshold,
    Try,
    figure_text,
    judged,
    last_line,
    progress,
    recorded_only,
    result,
    tail,
    with_retries,
)
from verify.bench.perftest_parse import PerftestParseError, parse_json, parse_text
from verify.facts.links import Port, discover_ports
from verify.judging import peaks
from verify.profiles import bench_setting, resolve_threshold
from verify.result import CheckResult, Status
from verify.runner import which
from verify.safe_io import TooLargeError, check_not_option, read_capped

TESTS = {
    "write_bw": "ib_write_bw",
    "read_bw": "ib_read_bw",
    "send_bw": "ib_send_bw",
    "write_lat": "ib_write_lat",
    "send_lat": "ib_send_lat",
}
DERIVED_RATIO = Threshold(
    limit=0.9, warn=0.95, source="derived: Mellanox/ngc_multinode_perf common.sh, 0.9 x port rate (x2 bidirectional)"
)
REMEDIATION = (
    "network: network_mtu / network_ring; check the HCA link (ibstat), cabling and nvidia_peermem for --use_cuda"
)
MAX_JSON_BYTES = 1 << 20  # perftest's --out_json is a few KB
ROCE_DEFAULT_GID = 3  # RoCE v2 over IPv4 on mlx5 (anchors_verify.md 4.5; perftest#44)


@dataclass
class PerftestOptions:
    tests: list = field(default_factory=lambda: ["write_bw"])
    devices: Optional[list] = None
    peer: Optional[str] = None
    gid_index: Optional[int] = None
    use_cuda: Optional[int] = None
    bidirectional: bool = False
    size_bytes: int = 8 << 20
    duration_s: int = 5
    port: int = 18515
    tries: int = 2
    timeout_s: float = 60.0
    server_start_s: float = 1.0
    tool_dir: Optional[str] = None  # where perftest lives when not on PATH


def perftest_argv(
    tool: str, port: Port, opts: PerftestOptions, tcp_port: int, server: Optional[str], json_file: Optional[str]
) -> list:
    """One side's argv; the client is the side given the server's address."""
    argv = [tool, "-d", port.device, "-i", str(port.port), "-p", str(tcp_port), "-F"]
    bandwidth = tool.endswith("_bw")
    if bandwidth:
        argv += ["--report_gbits", "-s", str(opts.size_bytes), "-D", str(opts.duration_s)]
        if opts.bidirectional:
            argv.append("-b")
    gid = opts.gid_index
    if gid is None and port.link_layer.lower() == "ethernet":
        gid = ROCE_DEFAULT_GID
    if gid is not None:
        argv += ["-x", str(gid)]
    if opts.use_cuda is not None and bandwidth:
        argv.append(f"--use_cuda={opts.use_cuda}")
    if json_file:
        argv += ["--out_json", f"--out_json_file={json_file}"]
    if server:
        argv.append(server)
    return argv


def bw_threshold(profile, spec, port: Port, bidirectional: bool) -> Optional[Threshold]:
    absolute = resolve_threshold("rdma_bw_gbps", profile, spec)
    if absolute is not None:
        return absolute
    ratio = resolve_threshold("rdma_bw_port_ratio", profile, spec, DERIVED_RATIO)
    if port.rate_gbits is None:
        return None
    line = port.rate_gbits * (2 if bidirectional else 1)
    return Threshold(
        limit=round(ratio.limit * line, 2),
        warn=None if ratio.warn is None else round(ratio.warn * line, 2),
        source=f"{ratio.limit:g} x {line:g} Gb/s port rate ({ratio.source})",
    )


LATENCY_FLOOR = f"the fastest RDMA adapters' one-way latency, {peaks.RDMA_LATENCY_FLOOR_US:g} us"
NOTHING_MOVED = "a bandwidth test that moved nothing"


def judge(
    check_id: str,
    parsed,
    port: Port,
    test: str,
    threshold: Optional[Threshold],
    latency_ceiling: Optional[Threshold],
    bidirectional: bool = False,
) -> CheckResult:
    """Pure: a parsed perftest result -> the check result.

    Bandwidth is bounded by the port's own rate (x2 with -b), latency by the fastest wire's: a
    figure beyond either, or not a number, is ERROR, with or without a floor.
    """
    row = parsed.largest
    details = {
        "device": port.device,
        "port": port.port,
        "rate_gbits": port.rate_gbits,
        "link_layer": port.link_layer,
        "rows": [r.to_dict() for r in parsed.rows],
        "warnings": parsed.warnings,
    }
    if row is None:
        return result(check_id, Status.ERROR, f"{TESTS[test]} printed no result row", details=details)
    if test.endswith("_lat"):
        typical = row.latency_us.get("t_typical")
        if typical is None:
            return result(check_id, Status.ERROR, "no typical latency in the output", details=details)
        label = f"typical latency {figure_text(typical)} us at {row.size_bytes} B"
        if latency_ceiling is None:
            return recorded_only(check_id, typical, label, typical, details, None,
                                 peaks.RDMA_LATENCY_FLOOR_US, LATENCY_FLOOR)
        return judged(check_id, latency_ceiling, typical, label, latency_ceiling.describe() + " us", typical,
                      REMEDIATION, details, floor=peaks.RDMA_LATENCY_FLOOR_US, floor_source=LATENCY_FLOOR)
    average = row.bw_avg_gbits
    if average is None:
        return result(check_id, Status.ERROR, "no average bandwidth in the output", details=details)
    bound = peaks.rdma_port_bound(port.rate_gbits, bidirectional)
    label = f"{figure_text(average, 1)} Gb/s at {row.size_bytes} B"
    if threshold is None:
        return recorded_only(check_id, average, f"{label}; port rate unknown", average, details, bound,
                             0.0, NOTHING_MOVED)
    details["threshold"] = threshold.to_dict()
    details["physical_peak"] = bound.to_dict()
    return judged(check_id, threshold, average, label, threshold.describe() + " Gb/s", average, REMEDIATION, details,
                  f" ({threshold.source})", peak=bound.gbps, peak_source=bound.source, floor=0.0,
                  floor_source=NOTHING_MOVED)



def run_pair(node, server_argv: list, client_argv: list, opts: PerftestOptions) -> tuple:
    """(server output, client output). The server gets 10 s more than the client to finish."""
    holder: dict = {}

    def serve() -> None:
        holder["server"] = node.run(server_argv, timeout_s=opts.timeout_s + 10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    time.sleep(opts.server_start_s)
    client = node.run(client_argv, timeout_s=opts.timeout_s)
    thread.join(opts.timeout_s + 20)
    return holder.get("server"), client


def measure_one(node, port: Port, test: str, opts: PerftestOptions, tcp_port: int, tool: str) -> tuple:
    """(parsed or None, error or None, raw) for one test on one HCA."""
    # A new 0700 directory in /tmp itself: TMPDIR is the caller's (sudo -E keeps it), never where root writes.
    with tempfile.TemporaryDirectory(prefix="tunefleet-perftest-", dir="/tmp") as tmp:
        json_file = os.path.join(tmp, "client.json")
        server_argv = perftest_argv(tool, port, opts, tcp_port, None, None)
        if opts.peer:
            server_argv = [
                "ssh",
                "-o",
                "BatchMode=yes",
                "--",
                check_not_option(opts.peer, "--peer"),
                "timeout",
                str(int(opts.timeout_s + 10)),
                *server_argv,
            ]
        client_argv = perftest_argv(tool, port, opts, tcp_port, opts.peer or "127.0.0.1", json_file)
        server, client = run_pair(node, server_argv, client_argv, opts)
        raw = {
            "server_argv": server_argv,
            "client_argv": client_argv,
            "client_returncode": client.returncode,
            "client_stdout_tail": tail(client.stdout),
            "client_stderr_tail": tail(client.stderr),
            "server_stderr_tail": tail(server.stderr) if server else "(server did not return)",
        }
        if client.timed_out:
            return None, f"{tool} client hung: killed after {opts.timeout_s:.0f} s (server killed by its timeout)", raw
        text = ""
        if os.path.isfile(json_file):  # in our own fresh 0700 directory; still bounded, never a link
            try:
                text = read_capped(json_file, MAX_JSON_BYTES).decode("utf-8", errors="replace")
            except TooLargeError:
                text = ""  # a JSON file past its size is not perftest's: the table on stdout says the same
        try:
            try:
                parsed = parse_json(text) if text.strip() else parse_text(client.stdout)
            except PerftestParseError:
                parsed = parse_text(client.stdout)  # a JSON file cut short: the table on stdout says the same
        except PerftestParseError as exc:
            return None, f"{tool} output on {port.device} is broken ({exc}): not a measurement", raw
        if not parsed.rows:
            return (
                None,
                f"{tool} exited {client.returncode} without a result: {last_line(client.stderr or client.stdout)}",
                raw,
            )
        return parsed, None, raw


def options_from(profile: Optional[dict], overrides: Optional[dict]) -> PerftestOptions:
    opts = PerftestOptions(
        tests=list(bench_setting("rdma_tests", profile, ["write_bw"])), tries=int(bench_setting("tries", profile, 2))
    )
    for key, value in (overrides or {}).items():
        if value is not None:
            setattr(opts, key, value)
    return opts


def run(spec: Optional[dict], profile: Optional[dict], node, overrides: Optional[dict] = None) -> list:
    opts = options_from(profile, overrides)
    if opts.peer:
        try:
            check_not_option(opts.peer, "--peer")
        except ValueError as exc:  # bad input: said before any server starts
            return [result("bench.rdma", Status.ERROR, str(exc), remediation="name the peer by host name or address")]
    unknown = [t for t in opts.tests if t not in TESTS]
    if unknown:
        return [result("bench.rdma", Status.ERROR, f"unknown perftest test(s) {unknown}; known: {', '.join(TESTS)}")]
    root = getattr(node, "root", "/")
    ports = [p for p in discover_ports(root) if p.active and (not opts.devices or p.device in opts.devices)]
    if not ports:
        return [
            result("bench.rdma", Status.SKIP, "no active RDMA port under /sys/class/infiniband (no HCA on this node)")
        ]
    results = []
    latency_ceiling = resolve_threshold("rdma_lat_us", profile, spec)
    for offset, port in enumerate(ports):
        for test in opts.tests:
            check_id = f"bench.rdma.{port.device}.{test}"
            tool = os.path.join(opts.tool_dir, TESTS[test]) if opts.tool_dir else which(TESTS[test], root)
            if not tool:
                results.append(
                    result(
                        check_id,
                        Status.ERROR,
                        f"{TESTS[test]} (perftest) is not installed but {port.device} is an active HCA",
                        remediation="install perftest",
                    )
                )
                continue
            threshold = bw_threshold(profile, spec, port, opts.bidirectional)
            progress(
                f"perftest {TESTS[test]} on {port.device} port {port.port}"
                f" ({'peer ' + opts.peer if opts.peer else 'loopback'})"
            )

            def attempt(
                index: int,
                port=port,
                test=test,
                check_id=check_id,
                tool=tool,
                threshold=threshold,
                tcp_port=opts.port + offset,
            ) -> Try:
                # One HCA's broken run (a crash included) is that HCA's ERROR row; the others still run.
                try:
                    parsed, error, raw = measure_one(node, port, test, opts, tcp_port, tool)
                    if parsed is None:
                        return Try(result(check_id, Status.ERROR, error, details={"partial_output": raw}))
                    judged = judge(check_id, parsed, port, test, threshold, latency_ceiling, opts.bidirectional)
                except Exception as exc:  # noqa: BLE001
                    return Try(result(check_id, Status.ERROR, f"{TESTS[test]} on {port.device} crashed: "
                                      f"{type(exc).__name__}: {str(exc)[:200]}",
                                      details={"traceback": traceback.format_exc(limit=8)}))
                judged.details["run"] = raw
                return Try(judged)

            results.append(with_retries(attempt, opts.tries, check_id))
    return results
