"""``raystream users scram set|delete|list``: SCRAM credentials of Kafka-protocol users.

The password is read from the terminal (no echo) or, when stdin is not a terminal,
from its first line, never from the command line (where ``ps`` and shell history
would keep it); it is salted in this process and only salted keys leave it.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from raystream.cli.manage import print_json
from raystream.errors import InvalidRequestError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_parser(commands: Any) -> None:
    """Add ``users`` to the CLI's subcommands."""
    users = commands.add_parser("users", help="users of the Kafka-protocol listeners")
    kinds = users.add_subparsers(dest="kind", required=True)
    scram = kinds.add_parser("scram", help="SCRAM credentials (also checked by SASL/PLAIN)")
    actions = scram.add_subparsers(dest="action", required=True)
    set_ = actions.add_parser("set", help="set a user's password (read from the terminal/stdin)")
    set_.add_argument("user")
    set_.add_argument("--mechanism", choices=MECHANISMS, default="SCRAM-SHA-512")
    set_.add_argument("--iterations", type=int, default=8192)
    delete = actions.add_parser("delete", help="delete a user's credential for a mechanism")
    delete.add_argument("user")
    delete.add_argument("--mechanism", choices=MECHANISMS, default="SCRAM-SHA-512")
    listing = actions.add_parser("list", help="users and their mechanisms (never keys)")
    listing.add_argument("user", nargs="*")
    listing.add_argument("--output", choices=["text", "json"], default="text")


def _password() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("password: ")
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise InvalidRequestError("no password on stdin")
    return line


def users(args: argparse.Namespace, cluster: Any) -> int:
    """``users scram set | delete | list``."""
    admin = cluster.admin()
    if args.action == "set":
        admin.alter_user_scram_credentials(
            args.user, args.mechanism, _password(), iterations=args.iterations
        )
        print(f"set {args.mechanism} credential of {args.user}")
    elif args.action == "delete":
        admin.alter_user_scram_credentials(args.user, args.mechanism, None)
        print(f"deleted {args.mechanism} credential of {args.user}")
    else:
        found = admin.describe_user_scram_credentials(args.user or None)
        if args.output == "json":
            print_json(
                {u: [{"mechanism": m, "iterations": i} for m, i in c] for u, c in found.items()}
            )
        else:
            for user, credentials in found.items():
                described = ", ".join(f"{m} (iterations {i})" for m, i in credentials) or "none"
                print(f"{user}: {described}")
    return 0
