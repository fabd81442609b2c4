"""One all-reduce across every host of a fleet run, started on all hosts at once.

`python3 -m verify.fleet.multinode launch ...` runs on each node (the playbook starts it on all
hosts in parallel): it starts the chosen launcher (torchrun with a c10d rendezvous on the first
host; mpirun or srun when the user picks them) around the `worker` mode of this module, then
writes a crossnode result. The timing loop is verify.bench.torch_allreduce.allreduce_rows itself
(same sweep, CUDA-event timing on GPUs, slowest rank counts); the judging is verify.bench.nccl.judge
with the inter-node floor `nccl_allreduce_internode_busbw_gbps` of the profile the node's own verify
uses (the desired state's verify_profile, "auto" included), so one yardstick serves one node and many.
The figure is always bounded by the inter-node rail: 2 x the first host's RDMA port rates
(verify.judging.peaks.internode_busbw_bound says why), so a busbw no rail can carry is ERROR.

Only the first host (node rank 0) holds the measurement and its verdict; every other host records
that it took part, or why its ranks failed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

from verify.bounded_load import load_json_bounded
from verify.engine import engine_argv
from verify.safe_io import check_address, for_terminal

CHECK_ID = "fleet.nccl_allreduce_multinode"
THRESHOLD_KEY = "nccl_allreduce_internode_busbw_gbps"
REMEDIATION = ("gpu: gpu_nccl_conf (NCCL_IB_HCA, NCCL_SOCKET_IFNAME); network: network_mtu; "
               "check the HCAs and switch ports")


def launcher_argv(args: argparse.Namespace) -> list:
    """argv that starts this host's ranks; the worker is this module's `worker` mode. The rendezvous address and
    the hosts come from the nodes: each is checked to be an address or a host name first (ValueError naming it)."""
    check_address(args.master_addr, "--master-addr")
    for host in args.hosts if args.launcher == "mpirun" else []:
        check_address(host, "--hosts entry")
    worker = ["worker", "--backend", args.backend, "--max-bytes", str(args.max_bytes),
              "--min-bytes", str(args.min_bytes), "--iters", str(args.iters), "--warmup", str(args.warmup),
              "--out", args.result_file, "--timeout-s", str(args.timeout_s)]
    if getattr(args, "sendrecv", False):
        worker.append("--sendrecv")
    # Every interpreter runs isolated with only the trusted import directories this launcher itself got
    # (verify.engine.engine_argv: -I, then engine_sys_path); torchrun starts that argv as is (--no-python),
    # so no rank ever reads PYTHONPATH or a sitecustomize.py from the caller's directories.
    worker_argv = engine_argv("verify.fleet.multinode", worker)
    if args.launcher == "torchrun":
        # torchrun's own logs beside the result file (the run's private directory), never a torchelastic_*
        # directory it would otherwise leave in /tmp after every run.
        logs = os.path.join(os.path.dirname(os.path.abspath(args.result_file)), "torchelastic")
        return engine_argv("torch.distributed.run", [
            "--no-python", f"--log-dir={logs}", f"--nnodes={args.nnodes}", f"--nproc-per-node={args.nproc_per_node}",
            f"--node-rank={args.node_rank}", f"--master-addr={args.master_addr}", f"--master-port={args.master_port}",
            *worker_argv])
    if args.launcher == "mpirun":
        # mpirun starts every rank from the first host; the others only wait for their ranks.
        hosts = ",".join(f"{h}:{args.nproc_per_node}" for h in args.hosts)
        return ["mpirun", "--host", hosts, "-np", str(args.nnodes * args.nproc_per_node),
                "-x", f"MASTER_ADDR={args.master_addr}", "-x", f"MASTER_PORT={args.master_port}", *worker_argv]
    return ["srun", f"--nodes={args.nnodes}", f"--ntasks-per-node={args.nproc_per_node}",
            f"--export=ALL,MASTER_ADDR={args.master_addr},MASTER_PORT={args.master_port}", *worker_argv]


def rank_env() -> tuple:
    """(rank, world, local rank) from whichever launcher started us."""
    env = os.environ
    launchers = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                 ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))
    for rank_key, world_key, local_key in launchers:
        if rank_key in env and world_key in env:
            return int(env[rank_key]), int(env[world_key]), int(env.get(local_key, "0"))
    raise RuntimeError("no RANK/WORLD_SIZE in the environment: start the worker through a launcher")


def worker(args: argparse.Namespace) -> int:
    from datetime import timedelta

    rank, world, local_rank = rank_env()  # before importing torch: a bad start fails in milliseconds
    import torch
    import torch.distributed as dist

    from verify.bench.common import parse_size
    from verify.bench.torch_allreduce import allreduce_rows, sendrecv_rows, sweep, timing_method

    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.timeout_s))
    sizes = sweep(parse_size(args.min_bytes), parse_size(args.max_bytes))
    rows = allreduce_rows(dist, device, rank, world, sizes, args.iters, args.warmup)
    # Send/recv after the all-reduce, same sizes and timing loop (the pair test asks for both).
    exchanged = sendrecv_rows(dist, device, rank, world, sizes, args.iters, args.warmup) if args.sendrecv else None
    if rank == 0:
        from verify.safe_io import write_file_atomic  # runs as root on the node

        measured = {"world_size": world, "backend": args.backend, "torch": torch.__version__,
                    "timing": timing_method(device), "rows": rows}
        if exchanged is not None:
            measured["sendrecv_rows"] = exchanged
        write_file_atomic(args.out, json.dumps(measured))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def rail_bound(root: str = "/"):
    """The inter-node rail's busbw bound from this node's active RDMA ports (verify.judging.peaks)."""
    from verify.facts.links import discover_ports
    from verify.judging.peaks import internode_busbw_bound

    return internode_busbw_bound([p.rate_gbits for p in discover_ports(root) if p.active])


def measurement_schema() -> dict:
    """What the worker writes (rank 0): the torch engine's rows (verify.bench.torch_allreduce)."""
    from verify.bench.torch_allreduce import ROW_SCHEMA
    from verify.payload_schema import ListOf, Maybe

    return {"world_size": int, "rows": ListOf(ROW_SCHEMA), "backend": Maybe(str), "timing": Maybe(str),
            "sendrecv_rows": Maybe(ListOf(ROW_SCHEMA))}


def judge_run(payload: Optional[dict], returncode: Optional[int], output_tail: str, args: argparse.Namespace,
              spec: Optional[dict], profile: Optional[dict] = None, rail=None, floor=None) -> dict:
    """The crossnode result (a CheckResult dict) for this host, judged against the inter-node floor
    (the desired state's verify_thresholds, else `profile`'s) and bounded by `rail` (a Peak; None:
    this node's RDMA ports, rail_bound); `floor` (a Threshold) serves when neither sets one (the pair
    test's floor from the rail's rate, verify.fleet.nccl_pair.rail_floor). A malformed measurement is
    one ERROR naming the field; malformed rows are dropped (payload_error_record says which) and the
    others judged."""
    from verify.bench.common import payload_error
    from verify.bench.common import result as bench_result
    from verify.payload_schema import checked_payload
    from verify.result import Status

    expected_ranks = args.nnodes * args.nproc_per_node
    if returncode != 0:
        why = "timed out" if returncode is None else f"exited {returncode}"
        return _as_fleet(bench_result(CHECK_ID, Status.ERROR, f"the {args.nnodes}-node all-reduce {why} on this host",
                                      remediation=REMEDIATION, details={"output_tail": output_tail}))
    if args.node_rank != 0:
        return _as_fleet(bench_result(CHECK_ID, Status.PASS,
                                      f"took part in the {args.nnodes}-node all-reduce judged on {args.master_addr}"))
    if payload is None:
        return _as_fleet(bench_result(CHECK_ID, Status.ERROR, "the all-reduce finished without a measurement",
                                      remediation=REMEDIATION, details={"output_tail": output_tail}))
    payload, malformed = checked_payload(payload, measurement_schema())
    if payload is None:
        error = payload_error(CHECK_ID, f"the {args.nnodes}-node all-reduce", malformed)
        error.remediation = REMEDIATION
        return _as_fleet(error)
    from verify.bench.nccl import Measurement, NcclOptions, judge
    from verify.bench.nccl_parse import CurvePoint, NcclTransport

    points = [CurvePoint(r["size_bytes"], r["count"], r["dtype"], r["redop"], r["time_us"], r["algbw_gbps"],
                         r["busbw_gbps"], r["wrong"]) for r in payload["rows"]]
    wrong = [p.size_bytes for p in points if p.wrong]
    problems = [f"wrong all-reduce results at sizes {wrong[:4]}"] if wrong else []
    measurement = Measurement("torch", points, payload["world_size"], NcclTransport(), problems,
                              {"backend": payload.get("backend"), "torch": payload.get("torch")}, malformed)
    from verify.profiles import resolve_threshold

    threshold = resolve_threshold(THRESHOLD_KEY, profile, spec, floor)
    opts = NcclOptions(backend=args.backend, allow_socket=args.backend == "gloo")
    peak = rail if rail is not None else rail_bound()
    judged = judge(measurement, expected_ranks, threshold, opts, nvls_expected=None, peak=peak)
    if payload.get("sendrecv_rows"):
        _judge_sendrecv(judged, payload["sendrecv_rows"], measurement, expected_ranks, threshold, opts, peak)
    judged.details.update({"nodes": args.nnodes, "launcher": args.launcher, "backend": args.backend,
                           "value": judged.observed, "unit": "GB/s", "profile": (profile or {}).get("name"),
                           "timing": payload.get("timing")})
    if judged.status != Status.PASS:
        judged.remediation = REMEDIATION  # across nodes the NICs and switches are the suspects, not NVLink
    return _as_fleet(judged)


def _judge_sendrecv(judged, rows: list, allreduce, expected_ranks: int, threshold, opts, peak) -> None:
    """Judge the send/recv curve by the same floor and bound as the all-reduce (on 2 ranks across two
    nodes both carry one NIC's rate each way: busbw = algbw for both), and fold it into `judged`:
    its figure in details["sendrecv"], the worse status of the two, its reason when it is the worse."""
    from verify.bench.nccl import Measurement, judge
    from verify.bench.nccl_parse import CurvePoint
    from verify.result import STATUS_ORDER

    points = [CurvePoint(r["size_bytes"], r["count"], r["dtype"], r["redop"], r["time_us"], r["algbw_gbps"],
                         r["busbw_gbps"], r["wrong"]) for r in rows]
    wrong = [p.size_bytes for p in points if p.wrong]
    problems = [f"wrong send/recv data at sizes {wrong[:4]}"] if wrong else []
    exchanged = judge(Measurement("torch", points, allreduce.ranks, allreduce.transport, problems, allreduce.raw),
                      expected_ranks, threshold, opts, nvls_expected=None, peak=peak)
    judged.details["sendrecv"] = {"status": exchanged.status.value, "busbw_gbps": exchanged.observed,
                                  "reason": exchanged.reason, "curve": exchanged.details.get("curve")}
    if STATUS_ORDER[exchanged.status] < STATUS_ORDER[judged.status]:
        judged.status = exchanged.status
        judged.reason = f"send/recv: {exchanged.reason} (all-reduce: {judged.reason})"


def payload_error_record(payload: Optional[dict], args: argparse.Namespace) -> Optional[dict]:
    """The ERROR record naming malformed rows the judged record left out, None when there are none
    (a measurement with nothing judgeable is already judge_run's own ERROR)."""
    if payload is None or args.node_rank != 0:
        return None
    from verify.bench.common import payload_error
    from verify.payload_schema import checked_payload

    kept, malformed = checked_payload(payload, measurement_schema())
    if kept is None or not malformed:
        return None
    record = _as_fleet(payload_error(CHECK_ID, f"the {args.nnodes}-node all-reduce", malformed))
    record["check_id"] = f"{CHECK_ID}.payload"
    return record


def verdict(payload: Optional[dict], returncode: Optional[int], output_tail: str, args: argparse.Namespace,
            spec: Optional[dict]) -> dict:
    """judge_run with the run's profile resolved (only the first host, holding a measurement, needs it)."""
    profile = None
    if args.node_rank == 0 and returncode == 0 and payload is not None:
        try:
            profile = run_profile(args, spec)
        except ValueError as exc:  # a profile that does not load is said, never silently judged without
            from verify.bench.common import result as bench_result
            from verify.result import Status

            return _as_fleet(bench_result(CHECK_ID, Status.ERROR, f"hardware profile: {exc}",
                                          remediation="fix verify_profile (see `tunefleet profiles`)",
                                          details={"measurement": payload}))
    return judge_run(payload, returncode, output_tail, args, spec, profile)


def run_profile(args: argparse.Namespace, spec: Optional[dict]) -> Optional[dict]:
    """The hardware profile this node's own `verify` judges against: --profile, else the desired
    state's verify_profile resolved the same way (verify.local_run.bench_profile; "auto" picks
    from this node's hardware), so the fleet run and the node run read the same floors."""
    from verify.local_run import bench_profile, load_named_profile

    if args.profile:
        return load_named_profile(args.profile)
    name = ((spec or {}).get("verify") or {}).get("profile")
    if not name:
        return None
    facts: dict = {}
    if name == "auto":
        from verify.facts.node_facts import gather_facts
        from verify.node import Node

        facts = gather_facts(Node())
    return bench_profile(spec, facts)


def _as_fleet(result) -> dict:
    data = result.to_dict()
    data["check_id"] = CHECK_ID
    data["role"] = "fleet"
    return data


def launch(args: argparse.Namespace) -> int:
    from verify.bench import nccl_transport
    from verify.bench.common import tail
    from verify.runner import run_command

    args.result_file = os.path.abspath(args.result_file)
    if args.nproc_per_node <= 0:
        from verify.bench.nccl import count_gpus

        args.nproc_per_node = 1 if args.backend == "gloo" else max(1, count_gpus("/"))
    # No PYTHONPATH: the ranks import only what launcher_argv names (this package, and the trusted
    # directories this process was started with by verify.isolated).
    env: dict = {}
    if args.backend == "gloo" and args.ifname:
        env["GLOO_SOCKET_IFNAME"] = args.ifname
    if args.backend == "nccl" and args.ifname:
        env["NCCL_SOCKET_IFNAME"] = args.ifname
    if args.backend == "nccl":
        env.update(nccl_transport.DEBUG_ENV)  # NCCL's output names the transport it took (issue 50)
    whole = ""
    if args.launcher == "mpirun" and args.node_rank != 0:
        returncode, output, payload = 0, "", None  # mpirun on the first host starts these ranks
    else:
        try:
            argv = launcher_argv(args)
        except ValueError as exc:  # a node-reported address that is no address: this run only, said in its record
            return _refused(args, str(exc))
        out = run_command(argv, timeout_s=args.timeout_s, env=env)
        returncode = None if out.timed_out else out.returncode
        whole = out.stdout + out.stderr
        output = tail(whole)
        payload = _read_json(args.result_file) if args.node_rank == 0 else None
    spec = _read_json(args.spec) if args.spec else None
    record = nccl_transport.judged_if_measured(verdict(payload, returncode, output, args, spec), whole, args.backend,
                                               spec)
    records = [record] + [r for r in [payload_error_record(payload, args)] if r]
    from verify.safe_io import write_file_atomic  # runs as root on the node

    write_file_atomic(args.out, json.dumps(records, indent=1))
    print(for_terminal(f"{record['status']}: {record['reason']}"))
    return 0


def _refused(args: argparse.Namespace, why: str) -> int:
    """The all-reduce not started (why): this host's record says so, ERROR (could not check)."""
    from verify.result import CheckResult, Status
    from verify.safe_io import write_file_atomic

    record = CheckResult(CHECK_ID, "fleet", Status.ERROR, "a rendezvous address", "refused",
                         f"the {args.nnodes}-node all-reduce was not started: {why}").to_dict()
    write_file_atomic(args.out, json.dumps([record], indent=1))
    print(for_terminal(f"{record['status']}: {record['reason']}"))
    return 0


def _read_json(path: str) -> Optional[dict]:
    try:
        return load_json_bounded(path, what="engine result")
    except (OSError, ValueError):  # BoundedLoadError (too big, too deep) included; the schema judges the rest
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.multinode")
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in ("launch", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
        p.add_argument("--min-bytes", default="1M")
        p.add_argument("--max-bytes", default="1G")
        p.add_argument("--iters", type=int, default=20)
        p.add_argument("--warmup", type=int, default=5)
        p.add_argument("--timeout-s", type=int, default=600)
        p.add_argument("--out", required=True, help="launch: crossnode result file; worker: measurement file")
        p.add_argument("--sendrecv", action="store_true", help="also time send/recv between the ranks")
    launch_p = sub.choices["launch"]
    launch_p.add_argument("--launcher", choices=("torchrun", "mpirun", "srun"), default="torchrun")
    launch_p.add_argument("--nnodes", type=int, required=True)
    launch_p.add_argument("--node-rank", type=int, required=True)
    launch_p.add_argument("--nproc-per-node", type=int, default=0, help="0: one per GPU (one for gloo)")
    launch_p.add_argument("--master-addr", required=True)
    launch_p.add_argument("--master-port", type=int, default=29531)
    launch_p.add_argument("--hosts", type=lambda s: [h for h in s.split(",") if h], default=[])
    launch_p.add_argument("--ifname", default="", help="interface for the rendezvous and gloo/NCCL sockets")
    launch_p.add_argument("--spec", default="", help="desired state (verify_thresholds, verify_profile)")
    launch_p.add_argument("--profile", default="",
                          help="hardware profile for the inter-node floor (default: the spec's verify_profile)")
    launch_p.add_argument("--result-file", default="allreduce-measurement.json")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return launch(args) if args.mode == "launch" else worker(args)


if __name__ == "__main__":
    sys.exit(main())
