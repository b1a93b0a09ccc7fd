"""ACLs in Kafka's model: bindings, filters, and the authorizer that decides on them.

A binding says that a principal (``User:alice``, ``User:*`` for everyone) connecting
from a host (an IP address, ``*`` for any) is allowed or denied an operation on a
resource: a topic, group, transactional id or the cluster, named literally, by the
literal wildcard ``*``, or by a prefix. As in Kafka's StandardAuthorizer:

- a super user (``super.users``) is allowed everything;
- a matching Deny wins over any Allow;
- Read, Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs;
  All stands for every operation (in an Allow and in a Deny);
- a resource no binding at all matches is allowed only if
  ``allow.everyone.if.no.acl.found`` (false by default).

Why an index and a cache: every Kafka request is checked (produce per topic), and an
operator may hold 10,000 bindings. The :class:`Authorizer` keeps literal bindings in a
dict by (resource type, name), prefixed ones in a dict by prefix together with the
prefix lengths in use (a name is matched by looking up each of its prefixes of those
lengths, never by scanning bindings), and remembers recent decisions until the
bindings change. Denials are written to the ``raystream.security.audit`` logger, one
line each (principal, host, operation, resource: never what the request carried).

Pure: no Ray here. The controller stores bindings in its metadata log
(:func:`AclBinding.to_json`); listeners hold an Authorizer (see
:mod:`raystream.actors.kafka_listener`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raystream.errors import InvalidRequestError

audit = logging.getLogger("raystream.security.audit")
"""One line per denied authorization: who, from where, what, on which resource."""

OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)
PERMISSIONS = ("Allow", "Deny")
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
PATTERN_TYPES = ("literal", "prefixed")
ANY = "Any"
"""A filter field that matches every value (Kafka's ``ANY``; None means the same)."""
MATCH = "match"
"""A filter pattern type: every binding that applies to the named resource (literal
name, the ``*`` wildcard, or a prefix of it)."""
WILDCARD = "*"
"""The literal resource name, principal (``User:*``) or host that matches any."""
CLUSTER_NAME = "kafka-cluster"
"""The one Cluster resource's name, as in Kafka."""

# Kafka's wire codes (org.apache.kafka.common.acl / resource), for the ACL APIs.
OPERATION_CODES = {
    ANY: 1,
    "All": 2,
    "Read": 3,
    "Write": 4,
    "Create": 5,
    "Delete": 6,
    "Alter": 7,
    "Describe": 8,
    "ClusterAction": 9,
    "DescribeConfigs": 10,
    "AlterConfigs": 11,
    "IdempotentWrite": 12,
}
PERMISSION_CODES = {ANY: 1, "Deny": 2, "Allow": 3}
RESOURCE_TYPE_CODES = {ANY: 1, "Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5}
PATTERN_TYPE_CODES = {ANY: 1, MATCH: 2, "literal": 3, "prefixed": 4}

IMPLIED_BY = {
    "Describe": frozenset(("Describe", "Read", "Write", "Delete", "Alter", "All")),
    "DescribeConfigs": frozenset(("DescribeConfigs", "AlterConfigs", "All")),
}
"""The Allow operations that grant an operation (else: itself and All)."""
CACHE_SIZE = 65_536
"""Decisions an Authorizer remembers (all forgotten when the bindings change)."""


def _canonical(kind: str, value: Any, names: Iterable[str]) -> str:
    """``value`` spelled as in ``names`` (case, ``_`` and ``-`` ignored: ``READ``,
    ``cluster_action``, ``Prefixed`` are accepted)."""
    if isinstance(value, str):
        wanted = value.replace("_", "").replace("-", "").lower()
        for name in names:
            if name.lower() == wanted:
                return name
    raise InvalidRequestError(f"unknown ACL {kind} {value!r}; expected one of {', '.join(names)}")


def _principal(value: Any) -> str:
    if not isinstance(value, str) or ":" not in value or value.endswith(":"):
        raise InvalidRequestError(
            f"ACL principal {value!r} is not of the form TYPE:NAME (e.g. User:alice, User:*)"
        )
    return value


def _name(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"ACL {kind} {value!r} must be a non-empty string")
    return value


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is allowed (or denied) ``operation`` on the
    resource ``resource_type``/``resource_name`` (a literal name, ``*``, or a prefix
    with ``pattern_type="prefixed"``).

    Names are accepted in any case (``"READ"``, ``"read"``, ``"transactional_id"``) and
    kept in Kafka's spelling (``Read``, ``TransactionalId``, ``literal``).

    Example:
        >>> AclBinding("User:alice", "*", "read", "allow", "topic", "orders-", "prefixed")
        AclBinding(principal='User:alice', host='*', operation='Read', permission='Allow', \
resource_type='Topic', resource_name='orders-', pattern_type='prefixed')

    Raises:
        InvalidRequestError: a field is not one Kafka knows (naming it).
    """

    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str = "literal"

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "principal", _principal(self.principal))
        s(self, "host", _name("host", self.host))
        s(self, "operation", _canonical("operation", self.operation, OPERATIONS))
        s(self, "permission", _canonical("permission", self.permission, PERMISSIONS))
        s(self, "resource_type", _canonical("resource type", self.resource_type, RESOURCE_TYPES))
        s(self, "resource_name", _name("resource name", self.resource_name))
        s(self, "pattern_type", _canonical("pattern type", self.pattern_type, PATTERN_TYPES))
        if self.resource_type == "Cluster" and self.resource_name != CLUSTER_NAME:
            raise InvalidRequestError(
                f"the Cluster resource is named {CLUSTER_NAME!r}, not {self.resource_name!r}"
            )

    def to_json(self) -> str:
        """The binding as a JSON object (the controller's metadata log stores it)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> AclBinding:
        """The binding :meth:`to_json` wrote."""
        return cls(**json.loads(text))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings a describe or delete applies to (Kafka's AclBindingFilter): each
    field None (or ``"Any"``) matches every value; ``pattern_type`` ``"any"`` matches
    bindings of either pattern type with exactly ``resource_name``, and ``"match"``
    every binding that applies to the resource so named (literal, ``*`` and prefixes
    of it).

    Example:
        >>> AclBindingFilter(principal="User:alice").matches(
        ...     AclBinding("User:alice", "*", "Read", "Allow", "Topic", "orders"))
        True
    """

    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    pattern_type: str | None = None

    def __post_init__(self) -> None:
        s = object.__setattr__
        for field, kind, names in (
            ("operation", "operation", OPERATIONS),
            ("permission", "permission", PERMISSIONS),
            ("resource_type", "resource type", RESOURCE_TYPES),
            ("pattern_type", "pattern type", (*PATTERN_TYPES, MATCH)),
        ):
            value = getattr(self, field)
            if value is not None and not (isinstance(value, str) and value.lower() == "any"):
                s(self, field, _canonical(kind, value, names))
            else:
                s(self, field, None)
        for field in ("principal", "host", "resource_name"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise InvalidRequestError(f"ACL filter {field} {value!r} must be a string or None")

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` is one this filter selects."""
        for field in ("principal", "host", "operation", "permission", "resource_type"):
            wanted = getattr(self, field)
            if wanted is not None and getattr(binding, field) != wanted:
                return False
        if self.pattern_type == MATCH:
            return self.resource_name is None or pattern_matches(
                binding.pattern_type, binding.resource_name, self.resource_name
            )
        if self.pattern_type is not None and binding.pattern_type != self.pattern_type:
            return False
        return self.resource_name is None or binding.resource_name == self.resource_name


def pattern_matches(pattern_type: str, pattern: str, name: str) -> bool:
    """Whether a binding's resource pattern applies to the resource ``name``."""
    if pattern_type == "prefixed":
        return name.startswith(pattern)
    return pattern in (name, WILDCARD)


def parse_super_users(value: str) -> frozenset[str]:
    """The principals of Kafka's ``super.users`` (``User:a;User:b``).

    Raises:
        InvalidRequestError: an entry is not TYPE:NAME.
    """
    return frozenset(_principal(p.strip()) for p in value.split(";") if p.strip())


def _audit_denial(principal: str, host: str, operation: str, rtype: str, name: str) -> None:
    audit.info(
        "DENIED principal=%s host=%s operation=%s resource=%s:%s",
        principal,
        host,
        operation,
        rtype,
        name,
    )


class Authorizer:
    """Decides requests against a set of bindings (see the module's rules).

    Args:
        bindings: the ACLs in force (replace them with :meth:`update`).
        super_users: principals allowed everything.
        allow_if_no_acl: allow a resource no binding matches (Kafka's
            ``allow.everyone.if.no.acl.found``).
    """

    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.update(bindings)

    def update(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the bindings in force (and forget every remembered decision)."""
        literal: dict[tuple[str, str], list[AclBinding]] = {}
        prefixed: dict[tuple[str, str], list[AclBinding]] = {}
        lengths: dict[str, set[int]] = {}
        for b in bindings:
            if b.pattern_type == "prefixed":
                prefixed.setdefault((b.resource_type, b.resource_name), []).append(b)
                lengths.setdefault(b.resource_type, set()).add(len(b.resource_name))
            else:
                literal.setdefault((b.resource_type, b.resource_name), []).append(b)
        self._literal = literal
        self._prefixed = prefixed
        self._lengths = {t: sorted(n) for t, n in lengths.items()}
        self._cache: dict[tuple[str, str, str, str, str], bool] = {}

    def matching(self, resource_type: str, name: str) -> list[AclBinding]:
        """Every binding whose resource pattern applies to ``resource_type``/``name``."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        for length in self._lengths.get(resource_type, ()):
            if length > len(name):
                break
            found.extend(self._prefixed.get((resource_type, name[:length]), ()))
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: str,
        resource_type: str,
        name: str,
        audit_denial: bool = True,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource; a
        denial is written to the audit log unless ``audit_denial`` is false (Metadata
        listing every topic hides the undescribable ones quietly, as Kafka does)."""
        key = (principal, host, operation, resource_type, name)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = allowed
        if not allowed and audit_denial:
            _audit_denial(principal, host, operation, resource_type, name)
        return allowed

    def allows_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the
        type (Kafka's ``authorizeByResourceType``: an idempotent producer needs Write
        on some topic). Scans the bindings: for rare calls (InitProducerId) only."""
        if principal in self.super_users:
            return True
        granting = IMPLIED_BY.get(operation, (operation, "All"))
        for index in (self._literal, self._prefixed):
            for (rtype, name), bindings in index.items():
                if rtype != resource_type:
                    continue
                granted = any(b.permission == "Allow" and b.operation in granting for b in bindings)
                if granted and self._decide(principal, host, operation, rtype, name):
                    return True
        return False

    def _decide(
        self, principal: str, host: str, operation: str, resource_type: str, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = self.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        wildcard_principal = principal.split(":", 1)[0] + ":" + WILDCARD
        granting = IMPLIED_BY.get(operation, (operation, "All"))
        allowed = False
        for b in acls:
            if b.principal != principal and b.principal != wildcard_principal:
                continue
            if b.host != host and b.host != WILDCARD:
                continue
            if b.permission == "Deny":
                if b.operation == operation or b.operation == "All":
                    return False
            elif b.operation in granting:
                allowed = True
        return allowed
