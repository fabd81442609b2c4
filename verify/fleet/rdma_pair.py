"""One RDMA pair test of the fleet, run on the client host: `python3 -m verify.fleet.rdma_pair`.

The measuring is verify.bench.perftest's (server started on the partner over ssh, client here,
judged against the port rate or the profile); this module only names the partner in each
result, so the controller can tell which pair failed and re-test the suspects with other
partners (verify/fleet/pairing.py). Runs on a bare python3.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

PREFIX = "fleet.rdma_pair"


def pair_results(results: list, server_host: str, client_host: str) -> list:
    """The perftest results as fleet results naming both ends; a pair passes only if all passed."""
    out = []
    for r in results:
        data = r.to_dict()
        suffix = data["check_id"][len("bench.rdma"):]
        data["check_id"] = f"{PREFIX}.{server_host}{suffix}"
        data["role"] = "fleet"
        data["details"] = dict(data.get("details") or {}, server=server_host, client=client_host)
        if data["status"] in ("FAIL", "ERROR"):
            data["reason"] = f"with {server_host} as server: {data['reason']}"
        out.append(data)
    return out


def pair_passed(records: list) -> Optional[bool]:
    """True/False for the pairing maths; None when nothing ran (SKIP only): no verdict either way."""
    statuses = {r["status"] for r in records}
    if not statuses or statuses == {"SKIP"}:
        return None
    return statuses <= {"PASS", "WARN", "SKIP"}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.rdma_pair")
    parser.add_argument("--server-host", required=True, help="inventory name of the partner")
    parser.add_argument("--server-addr", required=True, help="address ssh and perftest reach it at")
    parser.add_argument("--client-host", required=True)
    parser.add_argument("--spec", default="", help="desired state (verify_thresholds)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from verify.safe_io import check_address, check_not_option

    try:  # ssh and perftest get the address as an argument of their own: an address, never one that reads as an option
        check_address(check_not_option(args.server_addr, "--server-addr"), "--server-addr")
        check_not_option(args.server_host, "--server-host")
    except ValueError as exc:
        print(f"rdma_pair: {exc}", file=sys.stderr)
        return 2
    from verify.bench import perftest
    from verify.bounded_load import load_json_bounded
    from verify.node import Node

    spec = load_json_bounded(args.spec, what="desired state") if args.spec else None
    records = pair_results(perftest.run(spec, None, Node(), {"peer": args.server_addr}),
                           args.server_host, args.client_host)
    from verify.safe_io import write_file_atomic  # runs as root on the node

    write_file_atomic(args.out, json.dumps(records, indent=1, default=str))
    verdict = pair_passed(records)
    print(json.dumps({"server": args.server_host, "client": args.client_host, "passed": verdict}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
