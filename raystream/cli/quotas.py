"""``raystream quotas set | list | delete``: client quotas, as Kafka's
``kafka-configs --entity-type users/clients`` manages them.

An entity is ``--user NAME`` or ``--user-default``, ``--client-id ID`` or
``--client-id-default``, or one of each: ``raystream quotas set --user alice
--config producer_byte_rate=1048576``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from raystream.errors import InvalidRequestError
from raystream.security.quotas import CLIENT_ID, QUOTA_KEYS, USER


def add_parser(commands: Any) -> None:
    """The ``quotas`` subcommand and its actions, on the ``raystream`` parser."""
    actions = commands.add_parser("quotas", help="client quotas").add_subparsers(
        dest="action", required=True
    )
    set_ = actions.add_parser("set", help="set quotas of a user, a client id, or both")
    _entity_options(set_)
    set_.add_argument(
        "--config",
        action="append",
        required=True,
        help=f"key=value (repeatable); keys: {', '.join(QUOTA_KEYS)}",
    )
    listing = actions.add_parser("list", help="quotas set (filtered by the entity options)")
    _entity_options(listing)
    listing.add_argument(
        "--output", choices=["text", "json"], default="text", help="text (default) or json"
    )
    delete = actions.add_parser("delete", help="remove quotas of an entity")
    _entity_options(delete)
    delete.add_argument(
        "--key", action="append", help="quota key to remove (repeatable; default: all)"
    )


def _entity_options(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="the user (principal name without 'User:')")
    user.add_argument("--user-default", action="store_true", help="the default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="the client id")
    client.add_argument("--client-id-default", action="store_true", help="the default client id")


def _entity(args: argparse.Namespace, required: bool = True) -> tuple[tuple[str, Any], ...]:
    parts: list[tuple[str, Any]] = []
    if args.user is not None or args.user_default:
        parts.append((USER, args.user))
    if args.client_id is not None or args.client_id_default:
        parts.append((CLIENT_ID, args.client_id))
    if required and not parts:
        raise InvalidRequestError(
            "name an entity: --user/--user-default and/or --client-id/--client-id-default"
        )
    return tuple(parts)


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidRequestError(f"--config {key}={text!r}: not a number") from None


def entity_text(entity: Any) -> str:
    """An entity as Kafka's tools print it: ``user=alice, client-id=<default>``."""
    pairs = (entity,) if isinstance(entity[0], str) else entity
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in pairs)


def quotas(args: argparse.Namespace, cluster: Any) -> int:
    """``quotas set | list | delete``."""
    admin = cluster.admin()
    if args.action == "set":
        values: dict[str, Any] = {}
        for item in args.config:
            key, sep, text = item.partition("=")
            if not sep:
                raise InvalidRequestError(f"--config {item!r} is not of the form key=value")
            values[key.strip()] = _number(key.strip(), text.strip())
        admin.alter_client_quotas({_entity(args): values})
        print(f"quotas of {entity_text(_entity(args))} set: {values}")
    elif args.action == "delete":
        entity = _entity(args)
        keys = args.key or list(QUOTA_KEYS)
        admin.alter_client_quotas({entity: dict.fromkeys(keys)})
        print(f"quotas of {entity_text(entity)} removed: {', '.join(keys)}")
    else:
        found = admin.describe_client_quotas(list(_entity(args, required=False)))
        if args.output == "json":
            document = [
                {
                    "entity": dict((e,) if isinstance(e[0], str) else e),
                    "quotas": q,
                }
                for e, q in found.items()
            ]
            print(json.dumps(document, indent=2, sort_keys=True))
        else:
            for entity, values in sorted(found.items(), key=lambda item: entity_text(item[0])):
                shown = ", ".join(f"{k}={v:g}" for k, v in sorted(values.items()))
                print(f"{entity_text(entity)}: {shown}")
    return 0
