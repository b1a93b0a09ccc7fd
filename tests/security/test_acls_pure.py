"""The ACL model without Ray: bindings, filters, the authorizer's decisions (the ACL
matrix of issue 20), the audit log, and the index's speed with 10,000 bindings."""

from __future__ import annotations

import logging

import pytest

from raystream.errors import InvalidRequestError
from raystream.security.acls import (
    CLUSTER_NAME,
    OPERATIONS,
    RESOURCE_TYPES,
    AclBinding,
    AclBindingFilter,
    Authorizer,
    parse_super_users,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def _name(resource_type: str) -> str:
    return CLUSTER_NAME if resource_type == "Cluster" else "orders"


def _binding(op: str, rtype: str, permission: str = "Allow", **kw: str) -> AclBinding:
    fields = {"principal": ALICE, "host": "*", "resource_name": _name(rtype), **kw}
    return AclBinding(
        fields["principal"],
        fields["host"],
        op,
        permission,
        rtype,
        fields["resource_name"],
        kw.get("pattern_type", "literal"),
    )


MATRIX = [(op, rtype) for rtype in RESOURCE_TYPES for op in OPERATIONS if op != "All"]


@pytest.mark.parametrize(("op", "rtype"), MATRIX)
def test_allow_passes_none_refuses(op: str, rtype: str) -> None:
    granted = Authorizer([_binding(op, rtype)])
    assert granted.authorize(ALICE, HOST, op, rtype, _name(rtype))
    assert not granted.authorize(BOB, HOST, op, rtype, _name(rtype))
    assert not Authorizer().authorize(ALICE, HOST, op, rtype, _name(rtype))


@pytest.mark.parametrize(("op", "rtype"), MATRIX)
def test_deny_overrides_a_prefixed_allow_and_super_user_passes(op: str, rtype: str) -> None:
    name = _name(rtype)
    # the Cluster resource has one name, so only a literal binding (Kafka's rule)
    pattern = "literal" if rtype == "Cluster" else "prefixed"
    prefix = name if rtype == "Cluster" else name[:3]
    authorizer = Authorizer(
        [
            _binding("All", rtype, resource_name=prefix, pattern_type=pattern),
            _binding(op, rtype, "Deny"),
        ],
        super_users=parse_super_users("User:root;User:ops"),
    )
    assert not authorizer.authorize(ALICE, HOST, op, rtype, name)
    assert authorizer.authorize("User:root", HOST, op, rtype, name)


def test_prefix_and_wildcard_resources() -> None:
    authorizer = Authorizer(
        [
            _binding("Read", "Topic", resource_name="orders-", pattern_type="prefixed"),
            _binding("Write", "Topic", resource_name="*"),
        ]
    )
    assert authorizer.authorize(ALICE, HOST, "Read", "Topic", "orders-eu")
    assert not authorizer.authorize(ALICE, HOST, "Read", "Topic", "order")
    assert authorizer.authorize(ALICE, HOST, "Write", "Topic", "anything")


def test_wildcard_principal_and_host_matching() -> None:
    authorizer = Authorizer(
        [
            _binding("Read", "Topic", principal="User:*"),
            _binding("Write", "Topic", host=HOST),
        ]
    )
    assert authorizer.authorize(BOB, "1.2.3.4", "Read", "Topic", "orders")
    assert authorizer.authorize(ALICE, HOST, "Write", "Topic", "orders")
    assert not authorizer.authorize(ALICE, "10.0.0.2", "Write", "Topic", "orders")
    denied_from_host = Authorizer(
        [_binding("All", "Topic"), _binding("Read", "Topic", "Deny", host=HOST)]
    )
    assert not denied_from_host.authorize(ALICE, HOST, "Read", "Topic", "orders")
    assert denied_from_host.authorize(ALICE, "10.0.0.2", "Read", "Topic", "orders")


@pytest.mark.parametrize("granted", ["Read", "Write", "Delete", "Alter", "All"])
def test_operations_that_imply_describe(granted: str) -> None:
    assert Authorizer([_binding(granted, "Topic")]).authorize(
        ALICE, HOST, "Describe", "Topic", "orders"
    )


def test_implications_go_one_way_and_deny_is_not_implied() -> None:
    assert Authorizer([_binding("AlterConfigs", "Topic")]).authorize(
        ALICE, HOST, "DescribeConfigs", "Topic", "orders"
    )
    assert not Authorizer([_binding("Describe", "Topic")]).authorize(
        ALICE, HOST, "Read", "Topic", "orders"
    )
    assert not Authorizer([_binding("Create", "Topic")]).authorize(
        ALICE, HOST, "Describe", "Topic", "orders"
    )
    read_denied = Authorizer([_binding("All", "Topic"), _binding("Read", "Topic", "Deny")])
    assert read_denied.authorize(ALICE, HOST, "Describe", "Topic", "orders")


def test_allow_everyone_if_no_acl_found() -> None:
    lax = Authorizer([_binding("Read", "Topic")], allow_if_no_acl=True)
    assert lax.authorize(BOB, HOST, "Write", "Topic", "other")  # no ACL on "other"
    assert not lax.authorize(BOB, HOST, "Read", "Topic", "orders")  # ACLs on it, none for bob


def test_update_replaces_bindings_and_forgets_decisions() -> None:
    authorizer = Authorizer([_binding("Read", "Topic")])
    assert authorizer.authorize(ALICE, HOST, "Read", "Topic", "orders")
    authorizer.update([])
    assert not authorizer.authorize(ALICE, HOST, "Read", "Topic", "orders")


def test_allows_any_resource_of_a_type() -> None:
    authorizer = Authorizer(
        [_binding("Write", "Topic", resource_name="logs-", pattern_type="prefixed")]
    )
    assert authorizer.allows_any(ALICE, HOST, "Write", "Topic")
    assert not authorizer.allows_any(BOB, HOST, "Write", "Topic")
    assert not authorizer.allows_any(ALICE, HOST, "Read", "Topic")


def test_denials_are_audited_without_payload(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="raystream.security.audit"):
        Authorizer().authorize(BOB, HOST, "Write", "Topic", "orders")
        Authorizer().authorize(BOB, HOST, "Describe", "Topic", "hidden", audit_denial=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "raystream.security.audit"]
    assert lines == [
        "DENIED principal=User:bob host=10.0.0.1 operation=Write resource=Topic:orders"
    ]


def test_binding_normalizes_and_round_trips() -> None:
    b = AclBinding("User:a", "*", "cluster_action", "ALLOW", "cluster", CLUSTER_NAME)
    assert (b.operation, b.permission, b.resource_type) == ("ClusterAction", "Allow", "Cluster")
    assert AclBinding.from_json(b.to_json()) == b


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("alice", "*", "Read", "Allow", "Topic", "t"), "principal"),
        (("User:a", "*", "Reed", "Allow", "Topic", "t"), "operation"),
        (("User:a", "*", "Read", "Maybe", "Topic", "t"), "permission"),
        (("User:a", "*", "Read", "Allow", "Queue", "t"), "resource type"),
        (("User:a", "*", "Read", "Allow", "Topic", ""), "resource name"),
        (("User:a", "*", "Read", "Allow", "Topic", "t", "regex"), "pattern type"),
        (("User:a", "*", "Read", "Allow", "Cluster", "c"), "kafka-cluster"),
    ],
)
def test_bad_binding_names_the_field(args: tuple, named: str) -> None:
    with pytest.raises(InvalidRequestError, match=named):
        AclBinding(*args)


def test_filter_semantics() -> None:
    literal = _binding("Read", "Topic")
    prefixed = _binding("Write", "Topic", resource_name="ord", pattern_type="prefixed")
    wildcard = _binding("Read", "Topic", resource_name="*")
    other = _binding("Read", "Group", principal=BOB)
    every = [literal, prefixed, wildcard, other]
    assert [b for b in every if AclBindingFilter().matches(b)] == every
    assert [b for b in every if AclBindingFilter(operation="any", principal=BOB).matches(b)] == [
        other
    ]
    by_name = AclBindingFilter(resource_type="Topic", resource_name="orders")
    assert [b for b in every if by_name.matches(b)] == [literal]
    match = AclBindingFilter(resource_type="Topic", resource_name="orders", pattern_type="match")
    assert [b for b in every if match.matches(b)] == [literal, prefixed, wildcard]
    only_prefixed = AclBindingFilter(pattern_type="prefixed")
    assert [b for b in every if only_prefixed.matches(b)] == [prefixed]


def test_ten_thousand_acls_authorize_in_microseconds() -> None:
    bindings = [
        AclBinding(f"User:u{i % 100}", "*", "Write", "Allow", "Topic", f"topic-{i}")
        for i in range(9_000)
    ] + [
        AclBinding(f"User:u{i % 100}", "*", "Read", "Allow", "Topic", f"pre-{i}-", "prefixed")
        for i in range(1_000)
    ]
    authorizer = Authorizer(bindings)
    for i in range(2_000):  # distinct keys: no decision comes from the cache
        assert authorizer.authorize(f"User:u{i % 100}", HOST, "Write", "Topic", f"topic-{i}")
    assert authorizer.authorize("User:u7", HOST, "Read", "Topic", "pre-7-orders")
