"""Kafka's client quota APIs: DescribeClientQuotas (48) and AlterClientQuotas (49).

Translation only: the quotas live in the controller's metadata log
(``Controller.alter_client_quotas`` / ``describe_client_quotas``), their model and
checks in :mod:`raystream.security.quotas`. Pure: no Ray here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raystream.errors import RaystreamError
from raystream.kafka.call import NONE, Call
from raystream.security import quotas


def _entity_values(key: quotas.Entity) -> list[dict[str, Any]]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in key]


async def describe_client_quotas(call: Call, request: Any) -> Mapping[str, Any]:
    """The quotas of the entities matching the request's filter components."""
    components = [(c.entity_type, int(c.match_type), c.match) for c in request.components]
    found = await call.backend.controller("describe_client_quotas", components, request.strict)
    entries = [
        {
            "entity": _entity_values(key),
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for key, values in found.items()
    ]
    return {"throttle_time": 0, "error_code": NONE, "error_message": None, "entries": entries}


async def alter_client_quotas(call: Call, request: Any) -> Mapping[str, Any]:
    """Set or remove quotas; each entry answered on its own (one that does not
    validate is refused, the others applied together)."""
    results: list[dict[str, Any]] = []
    valid: dict[quotas.Entity, dict[str, float | None]] = {}
    for entry in request.entries:
        answered = {"entity": [(e.entity_type, e.entity_name) for e in entry.entity]}
        try:
            key = quotas.entity(answered["entity"])
            ops = {
                op.key: quotas.validate_quota(op.key, None if op.remove else op.value)
                for op in entry.ops
            }
            valid[key] = ops
            results.append({"key": key, "error_code": NONE, "error_message": None})
        except RaystreamError as error:
            results.append({"key": None, "error": error, **answered})
    if valid:
        try:
            await call.backend.controller("alter_client_quotas", valid, request.validate_only)
        except RaystreamError as error:
            for result in results:
                if result["key"] is not None:
                    result["error"] = error
    entries = []
    for result in results:
        error = result.get("error")
        names = result["key"] if result["key"] is not None else result["entity"]
        entries.append(
            {
                "error_code": NONE if error is None else error.code,
                "error_message": None if error is None else str(error),
                "entity": _entity_values(names),
            }
        )
    return {"throttle_time": 0, "entries": entries}
