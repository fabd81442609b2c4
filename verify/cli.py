"""`tunefleet` command line. Each subcommand's work lives in its own module, imported lazily
so the node-side path (`verify --local`) needs nothing beyond the standard library.

A run builds only its own verb's parser (`verb_of`): the scheduler's prolog starts a new process at every
job start, and building every verb's parser imported the fleet, history and scheduler modules it never
runs. `tunefleet --help`, no verb or an unknown word build them all, so the help lists every verb.

Exit status (verify.result EXIT_*): 0 nothing failed, 1 something FAILED, 2 bad input, 3 something could
not be checked (ERROR), 70 tunefleet itself failed (`failed_unexpectedly`: one line, never a traceback),
128 + signal when interrupted (130 Ctrl-C, 143 SIGTERM).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from verify import __version__
from verify.result import EXIT_CODES_HELP, EXIT_INTERNAL_ERROR

FORMATS = ("json", "md", "html", "junit", "prom")
VERBS = ("verify", "report", "baseline", "bench", "history", "ack", "check", "profiles", "spec", "compare", "fix",
         "site", "restore")


class Parser(argparse.ArgumentParser):
    """argparse, but a mistyped option is named with the nearest known one ("unknown option --locl; did you
    mean --local?"), by the parser of the verb it was given to, before any other error of that verb's
    (argparse would first say a required option is missing, or print the top-level usage for the extra
    word). Every verb's parser is one of these (add_subparsers makes them of its own class)."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        unknown = unknown_option(self, args)
        if unknown:
            import difflib  # only on this path: the hooks' start-up parses every job's command line

            close = difflib.get_close_matches(unknown, known_options(self), n=1, cutoff=0.6)
            self.error(f"unknown option {unknown}" + (f"; did you mean {close[0]}?" if close else ""))
        return super().parse_known_args(args, namespace)


def known_options(parser: argparse.ArgumentParser) -> list:
    return sorted(option for option in parser._option_string_actions if option.startswith("--"))


def unknown_option(parser: argparse.ArgumentParser, args: Sequence[str]) -> Optional[str]:
    """The first word of args that looks like an option this parser has not (nor as an unambiguous
    abbreviation), up to the verb a top-level parser hands on, a `--`, or the words a REMAINDER collects."""
    options = parser._option_string_actions
    verbs = {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
             for name in action.choices}
    remainder = any(action.nargs == argparse.REMAINDER for action in parser._actions if not action.option_strings)
    values_due = 0
    for word in args:
        if word == "--" or word in verbs:
            return None
        if values_due:
            values_due -= 1
            continue
        if not word.startswith("-") or word == "-" or parser._negative_number_matcher.match(word):
            if remainder:
                return None
            continue
        name = word.split("=", 1)[0]
        if name.startswith("--"):
            matches = [name] if name in options else [o for o in options if o.startswith(name)]
            if len(matches) != 1:
                return name if not matches else None  # ambiguous: argparse names the candidates itself
            action = options[matches[0]]
        elif word[:2] in options:
            action = options[word[:2]]  # -iINV, -qv: argparse takes them apart
            if len(word) > 2:
                continue
        else:
            return name
        if "=" not in word and isinstance(action.nargs, int):
            values_due = action.nargs
        elif "=" not in word and action.nargs is None and action.option_strings and _takes_value(action):
            values_due = 1
    return None


def _takes_value(action: argparse.Action) -> bool:
    """An optional that consumes one word (store, append), not a flag (store_true, count, help, version)."""
    return not isinstance(action, (argparse._StoreConstAction, argparse._CountAction, argparse._HelpAction,
                                   argparse._VersionAction, argparse.BooleanOptionalAction))


def verb_of(argv: Sequence[str]) -> Optional[str]:
    """The verb this command line runs, or None (help, --version, no verb, an unknown word): the first
    word not starting with '-' (the top level has no option taking a value)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in VERBS else None


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """Every verb's parser, or only the verb `only` (the others are not imported)."""
    def wanted(verb: str) -> bool:
        return only is None or only == verb

    parser = Parser(prog="tunefleet", description="Verify that GPU nodes are tuned and fast.", epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=f"tunefleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # Each verb's module adds its own parser; imported here, only for the verb that runs (or for the
    # full --help), to keep a hook's start-up short: an import kept lazy for speed in the entry point.
    if wanted("verify"):
        add_baseline_options(add_verify_parser(sub), " (with -i)")
    if wanted("report"):
        add_baseline_options(add_report_parser(sub), "")
    if wanted("baseline"):
        from verify.fleet.baseline_cli import add_parser as add_baseline_parser

        add_baseline_parser(sub)
    if wanted("bench"):
        b = sub.add_parser("bench", help="run one benchmark on this node")
        b.add_argument("name", help="benchmark name (see `tunefleet bench list`)")
        b.add_argument("args", nargs=argparse.REMAINDER, help="options for that benchmark")
    if wanted("history"):
        from verify.history.cli import add_history_parser

        add_history_parser(sub)
    if wanted("ack"):
        from verify.history.ack import add_ack_parser

        add_ack_parser(sub)
    if wanted("check"):
        from verify.scheduler.cli import add_parser as add_check_parser

        add_check_parser(sub)
    if wanted("compare"):
        from verify.fleet.compare import add_parser as add_compare_parser

        add_compare_parser(sub)
    if wanted("site") or wanted("restore"):
        from verify.fleet.apply import add_parsers as add_apply_parsers

        add_apply_parsers(sub)
    if wanted("fix"):
        from verify.fleet.fix import add_parser as add_fix_parser

        add_fix_parser(sub)
    if wanted("profiles"):
        sub.add_parser("profiles", help="list the shipped hardware profiles")
    if wanted("spec"):
        s = sub.add_parser("spec", help="print the desired state rendered from role defaults")
        s.add_argument("--profile", help="named hardware profile")
        s.add_argument("--vars", action="append", default=[], help="inventory-style vars file")
        s.add_argument("--host", default="localhost")
    return parser


def add_report_parser(sub) -> argparse.ArgumentParser:
    r = sub.add_parser("report", help="rebuild the fleet report from saved node reports")
    r.add_argument("directory", nargs="+", help="directory holding node reports (reports/<run-id>); several: the "
                   "slices of one fleet run (AWX slice jobs), joined into one run directory (verify/fleet/slices.py)")
    r.add_argument("--format", default="json,md,html,junit", help="comma list of formats")
    r.add_argument("--out", default=None, help="where to write (default: the directory itself)")
    r.add_argument("--world-readable", action="store_true",
                   help="fleet reports readable by every user (default: owner only)")
    return r


def add_baseline_options(parser_: argparse.ArgumentParser, where: str) -> None:
    """verify and report judge each node against the fleet baseline (verify.fleet.baseline)."""
    parser_.add_argument("--baseline", metavar="FILE", help="fleet baseline (`tunefleet baseline`) to judge "
                         "each node's figures against" + where)
    parser_.add_argument("--rules", metavar="FILE", help="YAML rules for --baseline: per check_id glob a floor, "
                         "a percentage below the baseline or a within-node spread (default: 10%% FAIL, 5%% WARN)")


def add_verify_parser(sub) -> argparse.ArgumentParser:
    from verify.history.cli import add_verify_arguments  # standard library only

    v = sub.add_parser("verify", help="verify this node (--local) or a fleet (-i INVENTORY)")
    where = v.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true", help="verify the node this runs on")
    where.add_argument("-i", "--inventory", help="verify every host of an Ansible inventory")
    source = v.add_mutually_exclusive_group()
    source.add_argument("--spec", help="desired state file (JSON, or YAML on the controller)")
    source.add_argument("--profile", help="named hardware profile (see `tunefleet profiles`)")
    v.add_argument("--vars", action="append", default=[], help="inventory-style vars file overriding role defaults")
    v.add_argument("--root", default="/", help="root of the tree to read /proc, /sys and /etc from")
    v.add_argument("--format", default="json,md,html,junit,prom", help=f"comma list of {', '.join(FORMATS)}")
    v.add_argument("--out", default="reports", help="directory for the reports")
    v.add_argument("--world-readable", action="store_true",
                   help="reports readable by every user (default: owner only, they hold system detail)")
    from verify.bench import names_text  # standard library only

    v.add_argument("--bench", default=None, type=bench_names,
                   help=f"{names_text()} (quick: the set this node's hardware can run, short sweeps; full: the "
                        "same set with the profile's long sweeps; dcgm and burn run only when named; default: the "
                        "desired state's verify_benchmarks, [quick])")
    v.add_argument("--no-bench", action="store_true", help="config checks only")
    v.add_argument("--limit", help="with -i: Ansible host pattern")
    v.add_argument("--forks", type=positive_int, default=None,
                   help="with -i: hosts Ansible works on at once (default: ansible.cfg's forks, 50); a 1,000-node "
                        "fleet wants a few hundred (README: Verifying 1,000 nodes)")
    from verify.fleet.slices import slice_option

    v.add_argument("--slices", type=slice_option, default=None,
                   help="with -i: N ansible-playbook processes at once, each over a slice of the hosts, into one run "
                        "directory and one fleet report; auto: the core count (README: Verifying a large fleet)")
    v.add_argument("--slice-by", metavar="PREFIX", default=None,
                   help="with --slices: keep each inventory group whose name starts with PREFIX (a rack) in one slice")
    v.add_argument("--quiet", action="store_true", help="no terminal table")
    v.add_argument("--inject", metavar="DIR", default=None,
                   help="drill: with --local, answer the commands captured in DIR (<name>.argv + .stdout, "
                        "as tests/device/capture_health.sh writes them) with their captured output, run every "
                        "other command for real; the report says so (verify/inject.py)")
    v.add_argument("--ib-fabric", metavar="FILE", default=None,
                   help="with -i: judge the fabric side of every host's IB links from FILE, a captured "
                        "`ibqueryerrors -r` output, each switch port's errors shown on the host it faces "
                        "(verify/fleet/ib_fabric.py; the inventory's verify_node_ib_fabric_host runs it live)")
    v.add_argument("--probe-login", action="store_true",
                   help="also open a login session (su -l nobody) and record the ulimits it gets")
    add_verify_arguments(v)  # --history options (verify.history.cli)
    return v


def positive_int(text: str) -> int:
    """A count that must be at least 1 (--forks); anything else is bad input, refused by the parser."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def bench_names(text: str) -> str:
    """--bench: every name a set, a benchmark or an alias of one (verify.bench); an unknown name is bad
    input, refused by the parser (exit 2) before anything runs or is recorded."""
    from verify.bench import SETS, canonical, names_text

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n.lower() not in SETS and canonical(n) is None]
    if not names or unknown:
        said = ", ".join(repr(n) for n in unknown) if unknown else "no name"
        raise argparse.ArgumentTypeError(f"unknown benchmark {said}; known: {names_text()}")
    return text


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(verb_of(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the verb's own parser, with its usage, not the top level's
        verb_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return dispatch(args)
    except Exception as exc:  # noqa: BLE001 - the one place an unforeseen error becomes exit 70, not a traceback
        return failed_unexpectedly(args, exc)


def verb_parser(parser: argparse.ArgumentParser, verb: Optional[str]) -> argparse.ArgumentParser:
    """The parser of `verb` (the top level when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and verb in action.choices:
            return action.choices[verb]
    return parser


# The options that name what a command reads: the line of an unforeseen error lists them.
INPUT_OPTIONS = ("spec", "profile", "vars", "root", "inject", "state_dir", "inventory", "directory", "baseline",
                 "rules", "history", "name")
MAX_LINE = 600


def failed_unexpectedly(args: argparse.Namespace, exc: BaseException) -> int:
    """An error no reader foresaw: one printable line (what, where in tunefleet, the command's inputs) and
    EXIT_INTERNAL_ERROR, which no hook reads as a FAIL (deploy/slurm: "could not check"; NPD: Unknown)."""
    import traceback  # only on this path: 4 ms of every hook's start otherwise (tokenize, linecache)

    where = ""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = tuple(os.path.join(top, name) + os.sep for name in ("verify", "plugins"))
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if os.path.abspath(frame.filename).startswith(ours):
            where = f" at {os.path.relpath(frame.filename, top)}:{frame.lineno} ({frame.name})"
            break
    inputs = []
    for name in INPUT_OPTIONS:
        value = getattr(args, name, None)
        values = value if isinstance(value, list) else [value]
        inputs += [f"--{name.replace('_', '-')} {v}" for v in values if isinstance(v, str) and v]
    filename = getattr(exc, "filename", None)
    if isinstance(filename, str) and filename:
        inputs.insert(0, f"file {filename}")
    command = f"tunefleet {args.command}" + (f" --mode {args.mode}" if getattr(args, "mode", None) else "")
    line = (f"{command}: internal error (exit {EXIT_INTERNAL_ERROR}, no verdict): {type(exc).__name__}: "
            f"{str(exc)[:200]}{where}; inputs: {', '.join(inputs) or 'none'}")
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in line).split())[:MAX_LINE]
    # node-problem-detector shows a plugin's stdout as the condition's message; every other caller logs stderr
    npd = args.command == "check" and getattr(args, "mode", None) == "npd"
    print(line, file=sys.stdout if npd else sys.stderr, flush=True)
    return EXIT_INTERNAL_ERROR


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "verify" and not args.inventory and (args.baseline or args.rules):
        print("tunefleet verify: --baseline/--rules judge a fleet run: use them with -i INVENTORY "
              "(or `tunefleet report DIR --baseline FILE`)", file=sys.stderr)
        return 2
    if args.command == "verify" and not args.inventory and getattr(args, "ib_fabric", None):
        print("tunefleet verify: --ib-fabric joins the fabric to a fleet run: use it with -i INVENTORY",
              file=sys.stderr)
        return 2
    if args.command == "verify" and not args.inventory and (getattr(args, "slices", None)
                                                            or getattr(args, "slice_by", None)):
        print("tunefleet verify: --slices/--slice-by cut a fleet run: use them with -i INVENTORY", file=sys.stderr)
        return 2
    if args.command == "verify" and args.inventory:
        from verify.fleet.run import main as run
    elif args.command == "verify":
        from verify.local_run import main as run
    elif args.command == "report":
        from verify.fleet.slices import report_main as run  # one DIR: verify.fleet.report; several: joined first
    elif args.command == "baseline":
        from verify.fleet.baseline_cli import main as run
    elif args.command == "bench":
        from verify.bench.cli import main as run
    elif args.command == "profiles":
        from verify.profiles import main as run
    elif args.command == "history":
        from verify.history.cli import main as run
    elif args.command == "ack":
        from verify.history.ack import main as run
    elif args.command == "check":
        from verify.scheduler.cli import main as run
    elif args.command in ("site", "restore"):
        from verify.fleet.apply import main as run
    elif args.command == "fix":
        from verify.fleet.fix import main as run
    elif args.command == "compare":
        from verify.fleet.compare import main as run
    else:
        from verify.local_run import spec_main as run
    if args.command not in ("verify", "bench"):
        return run(args)
    return run_interruptible(run, args)


def run_interruptible(run, args) -> int:
    """verify and bench: Ctrl-C or SIGTERM stops the run without a traceback (verify.interrupt).

    A benchmark interrupted mid-run is ERROR "interrupted", the reports/JSON hold what finished,
    and the exit status is 128 + the signal (130 Ctrl-C, 143 SIGTERM) instead of 0/1/2/3.
    """
    from verify import interrupt

    interrupt.install()
    try:
        code = run(args)
    except KeyboardInterrupt as exc:  # before any result could be kept (config checks, the fleet run)
        with interrupt.deferred():
            print(f"tunefleet {args.command}: {interrupt.Interrupted(interrupt.signum_of(exc))}: "
                  "stopped before any result was kept", file=sys.stderr)
        return interrupt.exit_status(interrupt.signum_of(exc))
    signum = interrupt.received()
    if signum is not None:
        with interrupt.deferred():
            print(f"tunefleet {args.command}: {interrupt.Interrupted(signum)}: results above are what finished",
                  file=sys.stderr)
        return interrupt.exit_status(signum)
    return code


if __name__ == "__main__":
    sys.exit(main())
