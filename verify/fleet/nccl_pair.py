"""One 2-node NCCL pair test on one rail: `python3 -m verify.fleet.nccl_pair launch ...`, run on both hosts
of a pair at once (side 0 holds the rendezvous and the measurement).

A rail is one HCA or cluster NIC, named the same on every node (mlx5_0, eth1). The test pins the
collective to it: NCCL_IB_HCA=<exact HCA> and NCCL_SOCKET_IFNAME=<exact netdev> for NCCL,
GLOO_SOCKET_IFNAME for the CPU engine (gloo over TCP), and the rendezvous address is the partner's
address on that rail, so a slow cable or port slows exactly this test. The GPU is the first one on the
rail's NUMA node (the one NCCL would pick for that NIC). The launching and the timing loop are
verify.fleet.multinode's (torchrun, verify.bench.torch_allreduce.allreduce_rows), so a pair figure
and the whole-fleet figure are the same measurement. The judging is multinode.judge_run's: the floor
is the profile's inter-node floor, else RATE_FLOOR_FRACTION of the rail's HCA rate, else of its NIC
speed; the bound is the rail's own physical peak (verify.judging.peaks.internode_busbw_bound): a
figure above it is ERROR, never PASS.

What the controller gets back is one Outcome per rail (verify/fleet/pairing.py), printed as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from verify.fleet import multinode
from verify.fleet.pairing import ERROR, FAIL, PASS, Outcome
from verify.safe_io import read_capped

CHECK_PREFIX = "fleet.nccl_pair"
# Without a profile, a pair on one rail must reach this fraction of the rail's line rate: a healthy
# 2-rank all-reduce over one NIC reaches ~90% of it (busbw = algbw for 2 ranks, one NIC's rate in each
# direction), so 70% leaves room for the protocol and still catches a link trained down a speed.
RATE_FLOOR_FRACTION = 0.7


@dataclass(frozen=True)
class Rail:
    """One rail as this node sees it: the HCA (None for a plain NIC), its netdev, NUMA node and rates."""

    name: str
    hca: Optional[str]
    ifname: Optional[str]
    numa: Optional[int]
    rate_gbits: Optional[float] = None  # the HCA port's rate
    speed_mbits: Optional[int] = None  # the netdev's ethtool speed


def _read(path: str) -> str:
    """A live sysfs attribute (a NIC's numa_node, an HCA port's state): bounded, as sysfs has it."""
    try:
        return read_capped(path, 4096, follow_symlinks=True).decode("ascii", errors="replace").strip()
    except OSError:
        return ""


def _int(text: str) -> Optional[int]:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def find_rail(root: str, name: str) -> Optional[Rail]:
    """The rail called `name` on this node (an HCA under /sys/class/infiniband or a netdev under
    /sys/class/net), None when it does not exist here."""
    from verify.facts.links import parse_port_rate

    ib = os.path.join(root, "sys", "class", "infiniband", name)
    if os.path.isdir(ib):
        netdevs = sorted(os.listdir(os.path.join(ib, "device", "net"))) if os.path.isdir(
            os.path.join(ib, "device", "net")) else []
        ports = os.path.join(ib, "ports")
        rates = [parse_port_rate(_read(os.path.join(ports, p, "rate")))
                 for p in (sorted(os.listdir(ports)) if os.path.isdir(ports) else []) if p.isdigit()]
        ifname = netdevs[0] if netdevs else None
        return Rail(name, name, ifname, _int(_read(os.path.join(ib, "device", "numa_node"))),
                    next((r for r in rates if r), None), _speed(root, ifname))
    net = os.path.join(root, "sys", "class", "net", name)
    if os.path.isdir(net):
        return Rail(name, None, name, _int(_read(os.path.join(net, "device", "numa_node"))), None, _speed(root, name))
    return None


def _speed(root: str, ifname: Optional[str]) -> Optional[int]:
    if not ifname:
        return None
    speed = _int(_read(os.path.join(root, "sys", "class", "net", ifname, "speed")))
    return speed or None


def gpu_on_numa(root: str, numa: Optional[int]) -> Optional[int]:
    """Index (PCI bus order, CUDA_DEVICE_ORDER=PCI_BUS_ID) of the first NVIDIA GPU on `numa`; the
    first GPU when the NUMA node is unknown; None when the node has no NVIDIA GPU."""
    base = os.path.join(root, "sys", "bus", "pci", "drivers", "nvidia")
    gpus = sorted(e for e in os.listdir(base) if e.count(":") == 2) if os.path.isdir(base) else []
    if not gpus:
        return None
    if numa is not None:
        for index, address in enumerate(gpus):
            if _int(_read(os.path.join(base, address, "numa_node"))) == numa:
                return index
    return 0


def rail_env(rail: Rail, backend: str, gpu: Optional[int]) -> dict:
    """Environment pinning the collective to this rail (the '=' prefix makes NCCL match exactly)."""
    env = {}
    if rail.ifname:
        env["GLOO_SOCKET_IFNAME"] = rail.ifname
        env["NCCL_SOCKET_IFNAME"] = f"={rail.ifname}"
    if backend == "nccl":
        if rail.hca:
            env["NCCL_IB_HCA"] = f"={rail.hca}"
        else:
            env["NCCL_IB_DISABLE"] = "1"  # a plain NIC rail: NCCL's socket transport over that NIC only
        if gpu is not None:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def rail_peak(rail: Rail):
    """The busbw no pair test over this one rail can exceed (a Peak)."""
    from verify.judging.peaks import Peak, internode_busbw_bound

    if rail.rate_gbits:
        return internode_busbw_bound([rail.rate_gbits])
    if rail.speed_mbits:
        bound = internode_busbw_bound([rail.speed_mbits / 1000])
        return Peak(bound.gbps, f"{rail.ifname} at {rail.speed_mbits} Mb/s (/sys/class/net/*/speed): "
                                f"busbw bound {bound.gbps:.3g} GB/s = 2 (tree) x the NIC speed")
    return internode_busbw_bound([None])


def rail_floor(rail: Rail):
    """The floor (a Threshold) when no profile or verify_thresholds sets one: a fraction of the HCA
    rate, else of the NIC speed; None when neither is known."""
    from verify.judging.thresholds import Threshold

    if rail.rate_gbits:
        return Threshold(RATE_FLOOR_FRACTION * rail.rate_gbits / 8,
                         source=f"{RATE_FLOOR_FRACTION:.0%} of {rail.hca} at {rail.rate_gbits:g} Gb/s")
    if rail.speed_mbits:
        return Threshold(RATE_FLOOR_FRACTION * rail.speed_mbits / 8000,
                         source=f"{RATE_FLOOR_FRACTION:.0%} of {rail.ifname} at {rail.speed_mbits} Mb/s")
    return None


def outcome_of(record: Optional[dict], a: str, b: str, rail: str, round_no: int, side1_ok: bool = True) -> Outcome:
    """The pair's Outcome from side 0's record (None: side 0 never answered, so it is the culprit);
    side1_ok False: side 1 could not take part. Only PASS/WARN pass; an ERROR (above the rail's peak,
    a failed launch) is no evidence against either host unless one end is known to be absent."""
    if record is None:
        return Outcome(a, b, rail, ERROR, round_no, culprit=a, reason=f"{a} did not answer")
    if not side1_ok:
        return Outcome(a, b, rail, ERROR, round_no, culprit=b, reason=f"{b} did not answer")
    details = record.get("details") or {}
    observed = record.get("observed")
    busbw = float(observed) if isinstance(observed, (int, float)) and not isinstance(observed, bool) else None
    floor = (details.get("threshold") or {}).get("limit")
    status = {"PASS": PASS, "WARN": PASS, "FAIL": FAIL}.get(record.get("status"), ERROR)
    culprit = str(details.get("culprit") or "") if status == ERROR else ""
    return Outcome(a, b, rail, status, round_no, busbw, float(floor) if isinstance(floor, (int, float)) else None,
                   culprit, str(record.get("reason") or "")[:300])


def _error_record(rail: str, reason: str, culprit: str) -> dict:
    from verify.bench.common import result as bench_result
    from verify.result import Status

    data = bench_result(f"{CHECK_PREFIX}.{rail}", Status.ERROR, reason,
                        remediation="check the rail exists on both hosts (ip link, ibstat) and the ranks can start",
                        details={"culprit": culprit}).to_dict()
    data["role"] = "fleet"
    return data


def _active_hcas(root: str) -> list:
    """HCAs with at least one ACTIVE port, sorted."""
    base = os.path.join(root, "sys", "class", "infiniband")
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    out = []
    for name in names:
        ports = os.path.join(base, name, "ports")
        states = [_read(os.path.join(ports, p, "state")) for p in (sorted(os.listdir(ports)) if os.path.isdir(ports)
                                                                   else [])]
        if any("ACTIVE" in state for state in states):
            out.append(name)
    return out


def local_rails(root: str, mode: str, interfaces: Sequence[str]) -> dict:
    """This node's rails, {name: {"hca", "ifname"}}: `each`: every HCA with an active port, else every
    cluster interface (network_interfaces) present here; `all`: one rail "all" over all of them (NCCL
    and gloo spread over every device, as a job would), its ifname the first one (the rendezvous)."""
    rails = [find_rail(root, name) for name in (_active_hcas(root) or list(interfaces))]
    rails = [r for r in rails if r is not None and (r.hca or r.ifname)]
    if mode == "all":
        ifnames = [r.ifname for r in rails if r.ifname]
        return {"all": {"hca": None, "ifname": ifnames[0] if ifnames else None, "address": address_of(ifnames[0])
                        if ifnames else None, "members": [r.name for r in rails]}} if rails else {}
    return {r.name: {"hca": r.hca, "ifname": r.ifname, "address": address_of(r.ifname) if r.ifname else None}
            for r in rails}


def address_of(ifname: str) -> Optional[str]:
    """The IPv4 address of a netdev (SIOCGIFADDR), where the partner meets this side on that rail; None
    when it has none."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def all_rail(root: str, interfaces: Sequence[str]) -> Optional[Rail]:
    """The rail "all": every HCA (or cluster NIC) at once; its rate and speed are the sums."""
    rails = [r for r in (find_rail(root, name) for name in (_active_hcas(root) or list(interfaces))) if r]
    if not rails:
        return None
    hcas = [r.hca for r in rails if r.hca]
    ifnames = [r.ifname for r in rails if r.ifname]
    rates = [r.rate_gbits for r in rails]
    speeds = [r.speed_mbits for r in rails]
    return Rail("all", ",".join(hcas) or None, ",".join(ifnames) or None, None,
                sum(rates) if all(rates) else None, sum(speeds) if all(speeds) else None)


def launch(args: argparse.Namespace, root: str = "/") -> list:
    """Run this host's side of the pair on each of its rails, one after the other; one record per
    rail (side 0's judged). Rail i meets at its own --master-addr (side 0's address on that rail) on
    --master-port + i."""
    from verify.safe_io import is_plain_component

    # A rail names this host's result file (<result-file>.<rail>): one path component only (safe_io's rule).
    unsafe = [name for name in args.rail if not is_plain_component(name) or name.startswith("-")]
    if unsafe:
        return [_error_record(name, f"rail name {name!r} cannot name a file or an argument: refused", "")
                for name in args.rail]
    addrs = list(args.master_addr)
    if len(addrs) == 1:
        addrs *= len(args.rail)
    if len(addrs) != len(args.rail):
        return [_error_record(name, f"{len(args.rail)} rails but {len(addrs)} --master-addr", "") for name in args.rail]
    return [launch_rail(args, name, addr, args.master_port + index, root)
            for index, (name, addr) in enumerate(zip(args.rail, addrs))]


def launch_rail(args: argparse.Namespace, name: str, master_addr: str, port: int, root: str = "/") -> dict:
    """This host's side of the pair on one rail; the record (side 0: judged)."""
    from verify.bench.common import tail
    from verify.runner import run_command

    me = args.a if args.side == 0 else args.b
    rail = all_rail(root, args.interfaces) if name == "all" else find_rail(root, name)
    if rail is None:
        return _error_record(name, f"rail {name} does not exist on {me} (no such HCA or netdev)", me)
    gpu = side_gpu(args, root, rail)
    if args.backend == "nccl" and gpu is None:
        return _error_record(name, f"no NVIDIA GPU on {me} for the nccl backend", me)
    run = argparse.Namespace(
        launcher="torchrun", backend=args.backend, nnodes=2, node_rank=args.side, nproc_per_node=1,
        master_addr=master_addr, master_port=port, hosts=[args.a, args.b],
        min_bytes=args.min_bytes, max_bytes=args.max_bytes, iters=args.iters, warmup=args.warmup,
        timeout_s=args.timeout_s, result_file=os.path.abspath(f"{args.result_file}.{name}"),
        sendrecv=not args.no_sendrecv)
    env = rail_env(rail, args.backend, gpu)  # no PYTHONPATH: multinode.launcher_argv runs every rank isolated
    env.update(transport_env(args, me))
    try:
        argv = multinode.launcher_argv(run)
    except ValueError as exc:  # side 0's address on this rail, as the node reported it, is no address
        return _error_record(name, str(exc), args.a)
    out = run_command(argv, timeout_s=args.timeout_s + 30, env=env)
    returncode = None if out.timed_out else out.returncode
    payload = multinode._read_json(run.result_file) if args.side == 0 else None
    spec = multinode._read_json(args.spec) if args.spec else None
    profile = None
    if args.side == 0 and returncode == 0:
        try:
            profile = multinode.run_profile(args, spec)
        except ValueError as exc:  # a profile that does not load is said, never silently judged without
            return _error_record(name, f"hardware profile: {exc}", "")
    record = multinode.judge_run(payload, returncode, tail(out.stdout + out.stderr), run, spec, profile,
                                 rail=rail_peak(rail), floor=rail_floor(rail))
    record["check_id"] = f"{CHECK_PREFIX}.{name}"
    record["details"] = dict(record.get("details") or {}, a=args.a, b=args.b, rail=name, hca=rail.hca,
                             ifname=rail.ifname, gpu=gpu, env=env)
    return transport_judged(record, out.stdout + out.stderr, args, rail, spec, profile)


# ---- the transport NCCL used (issue 50; verify.bench.nccl_transport holds the reading and the judge) ----------

def side_gpu(args: argparse.Namespace, root: str, rail: Rail) -> Optional[int]:
    """This side's GPU for the nccl backend: --gpu where given, else the first on the rail's NUMA node."""
    if args.backend != "nccl":
        return None
    return args.gpu if getattr(args, "gpu", None) is not None else gpu_on_numa(root, rail.numa)


def _gpu_index(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 4):
        raise argparse.ArgumentTypeError(f"--gpu {text!r}: a GPU index (0, 1, ...) is wanted")
    return int(text)


def transport_env(args: argparse.Namespace, me: str) -> dict:
    """NCCL_DEBUG=INFO for the nccl backend, so its output names the transport it took; with --one-machine,
    each side its own NCCL host with NCCL's intra-node transports off (verify.bench.nccl_transport)."""
    from verify.bench import nccl_transport

    if args.backend != "nccl":
        return {}
    env = dict(nccl_transport.DEBUG_ENV)
    if getattr(args, "one_machine", False):
        env.update(nccl_transport.one_machine_env(me))
    return env


def transport_judged(record: dict, output: str, args: argparse.Namespace, rail: Rail, spec: Optional[dict],
                     profile: Optional[dict]) -> dict:
    """Side 0's record with the transport NCCL reported shown and judged against the desired state's RDMA
    expectation; side 1 and gloo records as they are."""
    from verify.bench import nccl_transport

    if args.side != 0:
        return record
    return nccl_transport.judged_if_measured(record, output, args.backend, spec, profile, rail.speed_mbits,
                                             rail.ifname or "")


def answers_from_jobs(data: dict) -> dict:
    """host -> {"answered", "stdout"} from what the playbook records: {"alive": the hosts Ansible still
    has, "jobs": host -> its async_status result}. A host answered when Ansible still has it and its job
    finished with exit status 0."""
    alive = set(data.get("alive") or [])
    out = {}
    for host, job in (data.get("jobs") or {}).items():
        job = job if isinstance(job, dict) else {}
        out[host] = {"answered": host in alive and bool(job.get("finished")) and job.get("rc") == 0,
                     "stdout": str(job.get("stdout") or "")}
    return out


def round_outcomes(plan: list, answers: dict, round_no: int) -> list:
    """The controller's Outcomes of one round: plan is the round's [a, b, [rails]] list; answers is
    host -> {"answered": bool, "stdout": str} (what Ansible got back: a host it lost, or whose job failed
    or never finished, did not answer). Side 0 prints one Outcome per rail; a side that did not answer
    is the culprit; a rail side 1 could not run (absent there) names side 1."""
    outcomes = []
    for a, b, rails in plan:
        side0, side1 = answers.get(a) or {}, answers.get(b) or {}
        printed0 = {o.get("rail"): o for o in _json_lines(side0.get("stdout", ""))}
        printed1 = {o.get("rail"): o for o in _json_lines(side1.get("stdout", ""))}
        for rail in rails:
            if not side0.get("answered"):
                outcomes.append(outcome_of(None, a, b, rail, round_no))
            elif not side1.get("answered"):
                outcomes.append(outcome_of({}, a, b, rail, round_no, side1_ok=False))
            elif (printed1.get(rail) or {}).get("culprit") == b:
                outcomes.append(Outcome(a, b, rail, ERROR, round_no, culprit=b,
                                        reason=str(printed1[rail].get("reason") or "")[:300]))
            elif rail in printed0:
                try:
                    outcomes.append(replace(Outcome.from_dict(printed0[rail]), a=a, b=b, rail=rail, round=round_no))
                except (KeyError, ValueError, TypeError):
                    outcomes.append(Outcome(a, b, rail, ERROR, round_no, reason=f"{a} printed a malformed outcome"))
            else:
                outcomes.append(Outcome(a, b, rail, ERROR, round_no, reason=f"{a} printed no outcome for {rail}"))
    return outcomes


def _json_lines(text: str) -> list:
    out = []
    for line in str(text).splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.nccl_pair")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("launch", help="this host's side of one pair test, on each rail in turn")
    p.add_argument("--a", required=True, help="side 0's inventory name (rendezvous, measurement)")
    p.add_argument("--b", required=True, help="side 1's inventory name")
    p.add_argument("--side", type=int, choices=(0, 1), required=True)
    p.add_argument("--rail", required=True, action="append",
                   help="HCA (mlx5_0), netdev (eth1) or all, the same on both hosts; repeat for several rails")
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--master-addr", required=True, action="append",
                   help="side 0's address on each --rail (once: the same for all)")
    p.add_argument("--master-port", type=int, default=29541, help="rail i meets on this port + i")
    p.add_argument("--interfaces", type=lambda s: [i for i in s.split(",") if i], default=[],
                   help="cluster NICs, for the rail `all` on nodes without an HCA")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--gpu", type=_gpu_index, default=None,
                   help="this side's GPU (index in PCI bus order; default: the first on the rail's NUMA node)")
    p.add_argument("--one-machine", action="store_true",
                   help="both sides on one machine: each its own NCCL host, NCCL's P2P, SHM and NVLS off")
    p.add_argument("--min-bytes", default="1M")
    p.add_argument("--max-bytes", default="256M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout-s", type=int, default=300)
    p.add_argument("--no-sendrecv", action="store_true", help="time the all-reduce only")
    p.add_argument("--spec", default="", help="desired state (verify_thresholds, verify_profile)")
    p.add_argument("--profile", default="", help="hardware profile for the inter-node floor")
    p.add_argument("--result-file", default="pair-measurement.json", help="prefix of each rail's measurement file")
    p.add_argument("--out", required=True, help="where this side's records go (JSON list)")
    r = sub.add_parser("rails", help="this node's rails as JSON (the controller plans with them)")
    r.add_argument("--rails", choices=("each", "all"), default="each")
    r.add_argument("--interfaces", type=lambda s: [i for i in s.split(",") if i], default=[])
    c = sub.add_parser("collect", help="controller: one round's outcomes from what each host printed")
    c.add_argument("--plan", required=True, help="the round's plan (python -m verify.fleet.pairing round)")
    c.add_argument("--answers", required=True, help="JSON {host: {answered, stdout}}")
    c.add_argument("--round", type=int, required=True)
    c.add_argument("--out", required=True)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from verify.safe_io import write_file_atomic  # runs as root on the node

    if args.mode == "rails":
        import importlib.util

        torch = importlib.util.find_spec("torch") is not None
        print(json.dumps({"rails": local_rails("/", args.rails, args.interfaces) if torch else {},
                          "error": "" if torch else "PyTorch is not importable on this host"}))
        return 0
    if args.mode == "collect":
        try:
            plan, answers = multinode._read_json(args.plan), multinode._read_json(args.answers)
            if isinstance(answers, dict) and "jobs" in answers:
                answers = answers_from_jobs(answers)
            outcomes = round_outcomes(plan, answers, args.round)
        except (TypeError, ValueError, AttributeError) as exc:
            print(f"nccl_pair collect: bad --plan or --answers: {exc}", file=sys.stderr)
            return 2
        write_file_atomic(args.out, json.dumps([o.to_dict() for o in outcomes], indent=1))
        print(json.dumps([o.to_dict() for o in outcomes]))
        return 0
    records = launch(args)
    write_file_atomic(args.out, json.dumps(records, indent=1, default=str))
    for name, record in zip(args.rail, records):
        if args.side == 0:
            print(json.dumps(outcome_of(record, args.a, args.b, name, args.round).to_dict()))
        else:
            details = record.get("details") or {}
            print(json.dumps({"side": 1, "rail": name, "status": record["status"], "reason": record["reason"],
                              "culprit": details.get("culprit") or ""}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
