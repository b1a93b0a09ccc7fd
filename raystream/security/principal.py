"""Principals: the ``User:name`` strings authorization decides on.

A connection's principal comes from how it authenticated: the SASL user name, the
``sub`` of an OAUTHBEARER token, or the subject of a client certificate (mutual TLS),
mapped by Kafka's ``ssl.principal.mapping.rules``; an unauthenticated connection is
``User:ANONYMOUS``. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from raystream.errors import InvalidConfigError

USER = "User"
ANONYMOUS = "User:ANONYMOUS"


def user_principal(name: str) -> str:
    """``User:<name>``, Kafka's principal for an authenticated user."""
    return f"{USER}:{name}"


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One ``RULE:pattern/replacement/[LU]`` of ``ssl.principal.mapping.rules``
    (``DEFAULT`` is a rule with no pattern: the DN unchanged)."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        """The name this rule maps ``dn`` to, None when it does not match."""
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        # Kafka's replacements use $1; Python's expand uses \1.
        name = match.expand(re.sub(r"\$(\d+)", r"\\\1", self.replacement))
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name


_RULE = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


def parse_mapping_rules(
    text: str, setting: str = "ssl.principal.mapping.rules"
) -> list[MappingRule]:
    """The rules of an ``ssl.principal.mapping.rules`` value, in order.

    Kafka's syntax: ``RULE:regex/replacement/`` with an optional ``L`` or ``U`` after
    the last slash (lower or upper case), comma separated, and ``DEFAULT`` (the DN as
    it is). The regex must match the whole DN.

    Raises:
        InvalidConfigError: a rule does not parse or its regex does not compile
            (the message names the setting and the rule).
    """
    rules: list[MappingRule] = []
    rest = (text or "DEFAULT").strip()
    while rest:
        if rest.startswith("DEFAULT"):
            rules.append(MappingRule(None))
            rest = rest[len("DEFAULT") :]
        else:
            match = _RULE.match(rest)
            if match is None:
                raise InvalidConfigError(
                    f"{setting}: cannot parse the rule at {rest!r} "
                    "(expected RULE:regex/replacement/[L|U] or DEFAULT)"
                )
            pattern, replacement, case = (g.replace("\\/", "/") for g in match.groups())
            try:
                compiled = re.compile(pattern)
            except re.error as error:
                raise InvalidConfigError(f"{setting}: regex {pattern!r}: {error}") from None
            rules.append(MappingRule(compiled, replacement, case))
            rest = rest[match.end() :]
        rest = rest.strip()
        if rest.startswith(","):
            rest = rest[1:].strip()
        elif rest:
            raise InvalidConfigError(f"{setting}: expected ',' between rules at {rest!r}")
    return rules


def certificate_principal(dn: str, rules: list[MappingRule]) -> str:
    """The principal of a client certificate whose subject is ``dn`` (RFC 2253 form,
    as Kafka's ``X500Principal.getName()``: ``CN=alice,OU=eng,O=acme``): the first rule
    that matches names it; the whole DN when none does (Kafka's behaviour too)."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return user_principal(name)
    return user_principal(dn)


def subject_dn(der: bytes) -> str:
    """The RFC 2253 subject of a DER certificate (most specific RDN first, as Kafka)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
