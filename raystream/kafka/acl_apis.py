"""Kafka's ACL APIs: CreateAcls (30), DescribeAcls (29), DeleteAcls (31).

They translate Kafka's wire codes to :class:`~raystream.security.acls.AclBinding` and
filters and call the controller, which keeps the ACLs in its metadata log (the checks
that the requester may Alter or Describe the cluster are in
:mod:`raystream.kafka.acl_checks`). Pure: no Ray here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raystream.errors import InvalidRequestError, RaystreamError
from raystream.kafka.call import NONE, Call
from raystream.security.acls import (
    OPERATION_CODES,
    PATTERN_TYPE_CODES,
    PERMISSION_CODES,
    RESOURCE_TYPE_CODES,
    AclBinding,
    AclBindingFilter,
)

_OPERATIONS = {code: name for name, code in OPERATION_CODES.items()}
_PERMISSIONS = {code: name for name, code in PERMISSION_CODES.items()}
_RESOURCE_TYPES = {code: name for name, code in RESOURCE_TYPE_CODES.items()}
_PATTERN_TYPES = {code: name for name, code in PATTERN_TYPE_CODES.items()}


def _decode(kind: str, codes: Mapping[int, str], code: int) -> str:
    name = codes.get(int(code))
    if name is None:
        raise InvalidRequestError(f"unknown ACL {kind} code {int(code)}")
    return name


def binding_of(c: Any) -> AclBinding:
    """The binding of a CreateAcls creation.

    Raises:
        InvalidRequestError: a code is unknown or ANY (a binding names each field).
    """
    return AclBinding(
        c.principal,
        c.host,
        _decode("operation", _OPERATIONS, c.operation),
        _decode("permission", _PERMISSIONS, c.permission_type),
        _decode("resource type", _RESOURCE_TYPES, c.resource_type),
        c.resource_name,
        _decode("pattern type", _PATTERN_TYPES, getattr(c, "resource_pattern_type", 3)),
    )


def filter_of(f: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or a DeleteAcls filter."""
    return AclBindingFilter(
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_decode("operation", _OPERATIONS, f.operation),
        permission=_decode("permission", _PERMISSIONS, f.permission_type),
        resource_type=_decode("resource type", _RESOURCE_TYPES, f.resource_type_filter),
        resource_name=f.resource_name_filter,
        pattern_type=_decode("pattern type", _PATTERN_TYPES, getattr(f, "pattern_type_filter", 3)),
    )


def _codes(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": RESOURCE_TYPE_CODES[b.resource_type],
        "resource_name": b.resource_name,
        "pattern_type": PATTERN_TYPE_CODES[b.pattern_type],
        "principal": b.principal,
        "host": b.host,
        "operation": OPERATION_CODES[b.operation],
        "permission_type": PERMISSION_CODES[b.permission],
    }


def _failed(error: RaystreamError) -> dict[str, Any]:
    return {"error_code": error.code, "error_message": str(error)}


async def create_acls(call: Call, request: Any) -> Mapping[str, Any]:
    """Each creation's result: created, or the error naming what was wrong."""
    results: list[dict[str, Any] | None] = []
    bindings = []
    for creation in request.creations:
        try:
            bindings.append(binding_of(creation))
            results.append(None)
        except RaystreamError as error:
            results.append(_failed(error))
    if bindings:
        try:
            await call.backend.controller("create_acls", bindings)
        except RaystreamError as error:
            results = [r or _failed(error) for r in results]
    return {
        "throttle_time": 0,
        "results": [r or {"error_code": NONE, "error_message": None} for r in results],
    }


async def describe_acls(call: Call, request: Any) -> Mapping[str, Any]:
    """The bindings the request's filter matches, grouped by resource pattern."""
    found = await call.backend.controller("describe_acls", filter_of(request))
    resources: dict[tuple[str, str, str], list[AclBinding]] = {}
    for b in found:
        resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "error_message": None,
        "resources": [
            {
                "resource_type": RESOURCE_TYPE_CODES[rtype],
                "resource_name": name,
                "pattern_type": PATTERN_TYPE_CODES[pattern],
                "acls": [
                    {
                        "principal": b.principal,
                        "host": b.host,
                        "operation": OPERATION_CODES[b.operation],
                        "permission_type": PERMISSION_CODES[b.permission],
                    }
                    for b in bindings
                ],
            }
            for (rtype, name, pattern), bindings in resources.items()
        ],
    }


async def delete_acls(call: Call, request: Any) -> Mapping[str, Any]:
    """Per filter: the bindings it deleted, or the error naming what was wrong."""
    results: list[dict[str, Any] | None] = []
    filters = []
    for f in request.filters:
        try:
            filters.append(filter_of(f))
            results.append(None)
        except RaystreamError as error:
            results.append({**_failed(error), "matching_acls": ()})
    deleted: list[list[AclBinding]] = []
    if filters:
        try:
            deleted = await call.backend.controller("delete_acls", filters)
        except RaystreamError as error:
            results = [r or {**_failed(error), "matching_acls": ()} for r in results]
    answers = iter(deleted)
    for i, r in enumerate(results):
        if r is None:
            matched = next(answers)
            results[i] = {
                "error_code": NONE,
                "error_message": None,
                "matching_acls": [
                    {"error_code": NONE, "error_message": None, **_codes(b)} for b in matched
                ],
            }
    return {"throttle_time": 0, "filter_results": results}
