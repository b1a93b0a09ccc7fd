"""``raystream acls add | list | remove``: Kafka's ``kafka-acls`` as a subcommand.

One resource per command (``--topic``, ``--group``, ``--transactional-id`` or
``--cluster``); ``add`` takes one or more ``--operation`` and makes an Allow binding of
each (``--deny``: Deny); ``list`` and ``remove`` select with the same options, any left
out matching everything (``remove`` with none at all is refused, so a slip cannot
delete every ACL).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from raystream.errors import InvalidRequestError
from raystream.security.acls import CLUSTER_NAME, AclBinding, AclBindingFilter


def add_parser(commands: Any, output_option: Any) -> None:
    """The ``acls`` subcommands, added to the command line's subparsers."""
    acls = commands.add_parser("acls", help="manage ACLs").add_subparsers(
        dest="action", required=True
    )
    add = acls.add_parser("add", help="add ACL bindings")
    remove = acls.add_parser("remove", help="delete the ACL bindings selected")
    listing = acls.add_parser("list", help="list ACL bindings (all, or those selected)")
    for parser in (add, remove, listing):
        resource = parser.add_mutually_exclusive_group(required=parser is add)
        resource.add_argument("--topic")
        resource.add_argument("--group")
        resource.add_argument("--transactional-id")
        resource.add_argument("--cluster", action="store_true")
        parser.add_argument(
            "--principal", required=parser is add, help="e.g. User:alice (User:* for everyone)"
        )
        parser.add_argument("--host", default="*" if parser is add else None)
        parser.add_argument(
            "--operation",
            action="append",
            required=parser is add,
            help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
            "DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable)",
        )
        parser.add_argument(
            "--pattern-type",
            default="literal" if parser is add else None,
            help="literal (default for add) or prefixed",
        )
        if parser is add:
            parser.add_argument("--deny", action="store_true", help="a Deny binding")
        else:
            parser.add_argument("--permission", help="Allow or Deny")
    output_option(listing)


def _resource(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.topic is not None:
        return "Topic", args.topic
    if args.group is not None:
        return "Group", args.group
    if args.transactional_id is not None:
        return "TransactionalId", args.transactional_id
    if args.cluster:
        return "Cluster", CLUSTER_NAME
    return None, None


def _filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    resource_type, name = _resource(args)
    return [
        AclBindingFilter(
            principal=args.principal,
            host=args.host,
            operation=operation,
            permission=args.permission,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=args.pattern_type,
        )
        for operation in (args.operation or [None])
    ]


def describe(b: AclBinding) -> str:
    """One binding as a line for people."""
    return (
        f"{b.permission} {b.principal} from {b.host} {b.operation} on "
        f"{b.resource_type}:{b.resource_name} ({b.pattern_type})"
    )


def acls(args: argparse.Namespace, cluster: Any) -> int:
    """``acls add | list | remove``."""
    from raystream.cli.manage import print_json

    admin = cluster.admin()
    if args.action == "add":
        resource_type, name = _resource(args)
        permission = "Deny" if args.deny else "Allow"
        bindings = [
            AclBinding(
                args.principal, args.host, op, permission, resource_type, name, args.pattern_type
            )
            for op in args.operation
        ]
        admin.create_acls(bindings)
        for b in bindings:
            print(f"added: {describe(b)}")
    elif args.action == "list":
        found = [b for f in _filters(args) for b in admin.describe_acls(f)]
        if args.output == "json":
            print_json([dataclasses.asdict(b) for b in found])
        else:
            for b in found:
                print(describe(b))
    else:
        filters = _filters(args)
        if all(f == AclBindingFilter() for f in filters):
            raise InvalidRequestError("acls remove needs at least one selecting option")
        for b in admin.delete_acls(filters):
            print(f"removed: {describe(b)}")
    return 0
