"""`tunefleet check --mode prolog|epilog|health|npd`: the command line; the run itself is
verify.scheduler.hook.

A prolog or epilog starts its NVML reading (verify.scheduler.nvml.Reading) here, before it imports the
checks, the report and the scheduler's actions: the driver answers while this process imports. This module
therefore imports only what its parser needs.
"""
from __future__ import annotations

import argparse
import contextlib

from verify.history.drain import DEFAULT_CAP
from verify.scheduler import contract, nvml
from verify.scheduler.state import DEFAULT_DIR

EXIT_HELP = ("exit codes: prolog/epilog 0 run the job (also for a configuration finding, or when a check could not "
             "run), 1 a hardware fault the policy drains for (the node was drained); health 0 ok, 1 drained, 2 bad "
             "input, 3 could not check (ERROR); npd 0 OK, 1 problem (what drains; with --npd-events what is "
             "reported), 2 unknown; every mode 70 tunefleet itself failed (no verdict, never a drain: the Slurm "
             "hook answers 'could not check', NPD Unknown)")


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="one scheduler hook: Slurm prolog/epilog/HealthCheckProgram, an NPD plugin",
                       epilog=EXIT_HELP)
    c.add_argument("--mode", required=True, choices=contract.MODES,
                   help="prolog/epilog (<= 0.5 s GPU set), health (every check, no benchmark; drains on FAIL), "
                        "npd (node-problem-detector custom plugin: exit 0/1/2, one line)")
    source = c.add_mutually_exclusive_group()
    source.add_argument("--spec", help="desired state file (JSON)")
    source.add_argument("--profile", help="named hardware profile (see `tunefleet profiles`)")
    c.add_argument("--vars", action="append", default=[], help="inventory-style vars file overriding role defaults")
    c.add_argument("--root", default="/", help="root of the tree to read /proc, /sys and /etc from")
    c.add_argument("--inject", metavar="DIR", default=None,
                   help="drill: answer the commands captured in DIR (verify/inject.py); NVML and /dev/kmsg are "
                        "not read, so the captures are what is judged")
    c.add_argument("--state-dir", default=DEFAULT_DIR,
                   help=f"root-owned 0700 directory for the kernel-log cursor and counters (default {DEFAULT_DIR}; "
                        "'' keeps no state)")
    c.add_argument("--textfile-dir", default=None,
                   help="node_exporter textfile directory for tunefleet_<mode>.prom (default "
                        f"{contract.DEFAULT_TEXTFILE_DIR} when it exists; '' writes none)")
    c.add_argument("--report", metavar="FILE", default=None, help="also write the JSON node report here")
    c.add_argument("--no-drain", action="store_true", help="judge only: never drain or resume")
    c.add_argument("--dry-run", action="store_true", help="print the drain/resume commands instead of running them")
    c.add_argument("--scheduler", choices=("auto", "slurm", "kubernetes"), default="auto")
    c.add_argument("--node-name", default=None, help="the node's name in the scheduler (default: short host name, "
                                                     "$SLURMD_NODENAME in a Slurm hook)")
    c.add_argument("--drain-cap", default=DEFAULT_CAP,
                   help="drain no more than this share ('10%%') or count ('3') of the cluster's nodes "
                        f"(default {DEFAULT_CAP.replace('%', '%%')}); nodes tunefleet drained already count")
    c.add_argument("--policy", metavar="FILE", default=None,
                   help="the operator's policy (JSON): per Xid, check id, action or fault class drain / warn / "
                        "ignore, after how many failing runs, a recovery window (docs/verdicts.md); a bad file is "
                        "refused by name and the defaults apply (a hardware FAIL drains, a configuration finding "
                        "never does)")
    c.add_argument("--npd-events", action="store_true",
                   help="npd: exit 1 for what the policy reports but does not drain (an NPD temporary rule's "
                        "event); without it exit 1 only for what drains (the permanent condition)")
    c.add_argument("--max-output", type=int, default=contract.NPD_OUTPUT_LIMIT,
                   help="npd: cut the line to this many characters (the plugin's maxOutputLength)")


def main(args: argparse.Namespace) -> int:
    reading = None
    if args.mode in contract.JOB_MODES and contract.live_node(args.inject, args.root):
        with contextlib.suppress(OSError):  # no process or pipe to spare (a cgroup's pids.max): the mode reads it
            reading = nvml.Reading()
    try:
        # Imported after the reading started, to overlap it (an import kept lazy for speed in the entry point)
        from verify.scheduler import hook

        return hook.main(args, reading)
    finally:
        if reading is not None:
            reading.close()
