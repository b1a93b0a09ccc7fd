"""Kafka API handlers of authentication: SaslHandshake, SaslAuthenticate, and the
management of SCRAM credentials (DescribeUserScramCredentials,
AlterUserScramCredentials).

The SASL handlers drive the connection's :class:`~raystream.security.sasl.SaslSession`
(``call.session``, given by the server on SASL listeners); the server enforces the
order (nothing else before authentication) and closes the connection after a failed
exchange. Credentials are managed through the controller, which persists them in its
metadata log; clients send them already salted (Kafka's protocol), so no password
reaches the listener. Pure: no Ray here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from raystream.errors import (
    IllegalSaslStateError,
    RaystreamError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from raystream.kafka.call import NONE, Call
from raystream.security.scram import MECHANISM_TYPES, credential_from_salted

_MECHANISM_NAMES = {number: name for name, number in MECHANISM_TYPES.items()}


def _session(call: Call) -> Any:
    if call.session is None:
        raise IllegalSaslStateError("this listener does not speak SASL")
    return call.session


async def sasl_handshake(call: Call, request: Any) -> Mapping[str, Any]:
    """Start the mechanism the client names (fresh credentials first: a user added a
    moment ago can log in). Answers the enabled mechanisms either way."""
    session = _session(call)
    await call.backend.refresh_credentials()
    try:
        session.handshake(request.mechanism)
    except UnsupportedSaslMechanismError as error:
        return {"error_code": error.code, "mechanisms": list(session.mechanisms)}
    return {"error_code": NONE, "mechanisms": list(session.mechanisms)}


async def sasl_authenticate(call: Call, request: Any) -> Mapping[str, Any]:
    """One message of the exchange; a failure is answered with its code and message
    (never the credentials) and the server then closes the connection. The message is
    checked on a thread: an OAUTHBEARER token may need its JWKS fetched from the
    identity provider, which must not hold up the listener's other connections (the
    connection itself sends nothing else meanwhile: SaslAuthenticate is answered
    alone)."""
    session = _session(call)
    try:
        answer, lifetime_ms = await asyncio.to_thread(session.authenticate, request.auth_bytes)
    except RaystreamError as error:
        return {"error_code": error.code, "error_message": str(error), "auth_bytes": b""}
    return {
        "error_code": NONE,
        "error_message": None,
        "auth_bytes": answer,
        "session_lifetime": lifetime_ms,
    }


async def describe_user_scram_credentials(call: Call, request: Any) -> Mapping[str, Any]:
    """Each asked user's mechanisms and iterations (no users asked: every user);
    a user without credentials is answered RESOURCE_NOT_FOUND, as Kafka."""
    users = None if request.users is None else [u.name for u in request.users]
    found = await call.backend.controller("describe_scram_credentials", users)
    results = []
    for user, infos in found.items():
        if not infos:
            results.append(
                {
                    "user": user,
                    "error_code": 91,
                    "error_message": f"user {user!r} has no SCRAM credentials",
                }
            )
            continue
        results.append(
            {
                "user": user,
                "error_code": NONE,
                "credential_infos": [
                    {"mechanism": MECHANISM_TYPES[m], "iterations": i} for m, i in infos
                ],
            }
        )
    return {"error_code": NONE, "results": results, "throttle_time": 0}


async def alter_user_scram_credentials(call: Call, request: Any) -> Mapping[str, Any]:
    """Upsert and delete credentials (salted by the client), each user's outcome
    answered on its own."""
    errors: dict[str, tuple[int, str]] = {}
    upsertions = []
    for up in request.upsertions:
        try:
            mechanism = _mechanism(up.mechanism)
            credential = credential_from_salted(
                mechanism, up.salt, up.iterations, up.salted_password
            )
        except RaystreamError as error:
            errors[up.name] = (error.code, str(error))
            continue
        upsertions.append((up.name, credential.to_json()))
    deletions = []
    for de in request.deletions:
        try:
            deletions.append((de.name, _mechanism(de.mechanism)))
        except RaystreamError as error:
            errors[de.name] = (error.code, str(error))
    outcome = await call.backend.controller("alter_scram_credentials", upsertions, deletions)
    users = list(
        dict.fromkeys([*(u.name for u in request.upsertions), *(d.name for d in request.deletions)])
    )
    results = []
    for user in users:
        code, message = errors.get(user) or outcome.get(user) or (NONE, None)
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"results": results, "throttle_time": 0}


def _mechanism(number: int) -> str:
    try:
        return _MECHANISM_NAMES[number]
    except KeyError:
        raise UnacceptableCredentialError(f"unknown SCRAM mechanism number {number}") from None
