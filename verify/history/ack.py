"""`tunefleet ack HOST --reason TEXT`: an operator's word that a host was repaired (GPU reset, cable
replaced), kept in the history. Kernel and driver events older than the last ack are then shown as
history instead of failing the node (the lookback rule is in verify.history.store). Standard library only.
"""
from __future__ import annotations

import os
import sys

from verify.result import EXIT_BAD_INPUT

MAX_HOST = 253  # a DNS name's limit
MAX_REASON = 500  # one line a person reads in a report


def add_ack_parser(sub) -> None:
    p = sub.add_parser("ack", help="record that an operator repaired a host: its older events stop failing")
    p.add_argument("host", help="the host as its reports name it (the node's host name)")
    p.add_argument("--reason", required=True, help="what was done, e.g. 'GPU 3 reset after Xid 63'")
    p.add_argument("--history", metavar="PATH", default=None, help="history database (default: as for verify)")


def checked_text(option: str, value: object, limit: int) -> str:
    """One printable line, not empty, at most `limit` characters; ValueError names the option and value."""
    text = " ".join(str(value).split()) if isinstance(value, str) else ""
    if not text:
        raise ValueError(f"{option} {value!r}: must not be empty")
    if len(text) > limit:
        raise ValueError(f"{option} {text[:40]!r}...: {len(text)} characters, at most {limit}")
    if not text.isprintable():
        raise ValueError(f"{option} {text!r}: holds control characters")
    return text


def invoking_user() -> str:
    """The name of the real uid: who typed the command (not $USER, which anyone can set; under sudo the
    real uid is root, and SUDO_USER is as easy to forge, so it is not used either)."""
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def main(args) -> int:
    from verify.history.store import Ack, HistoryError, default_path, open_store
    from verify.report import utc_now

    try:
        host = checked_text("HOST", args.host, MAX_HOST)
        if any(c.isspace() or c == "/" for c in host):
            raise ValueError(f"HOST {host!r}: a host name has no spaces or slashes")
        reason = checked_text("--reason", args.reason, MAX_REASON)
    except ValueError as exc:
        print(f"tunefleet ack: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ack = Ack(host, utc_now(), reason, invoking_user())
    try:
        with open_store(args.history or default_path()) as store:
            known = host in store.hosts()
            store.acknowledge(ack)
            path = store.path
    except HistoryError as exc:
        print(f"tunefleet ack: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"recorded in {path}: {host} acknowledged at {ack.at_utc} by {ack.who}: {reason}")
    print("events before this time are shown as history and no longer fail the node")
    if not known:
        print(f"note: no run of {host} is recorded there yet; check the name matches its reports")
    return 0
