"""Kafka's ``listeners`` and ``advertised.listeners`` settings, parsed and checked.

A listener is ``NAME://host:port``; several are separated by commas. The name is the
security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) unless
``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) maps it to one, as Kafka;
names are unique. The host may be an address, empty or
``0.0.0.0`` (every interface), or ``node``: the Ray node's own address, which is what
``cluster.yaml`` uses so that each node's listener is reachable by clients elsewhere.
Port 0 takes a free port (the bound one is advertised), which lets several Ray nodes
on one machine (tests) each run a listener.

Kafka's per-listener settings: ``listener.name.<name>.<option>`` (the name in lower
case, as Kafka writes it) sets one of :data:`LISTENER_OPTIONS` for that listener only,
over the broker-wide option (each option falls back on its own), so two SSL listeners
can show different certificates. The name :data:`DIRECT_LISTENER` is the direct path
(raystream's own socket path, ``listener.host``): ``listener.security.protocol.map``
may map it to SSL, and ``listener.name.direct.*`` sets its TLS; no Kafka listener may
take that name.

``advertised.listeners`` (optional) says what Metadata responses tell clients to
connect to, for NAT or a load balancer in front; by default each listener advertises
the address it bound, ``0.0.0.0`` and ``node`` advertised as the node's address.

Pure: no Ray; the listener actor resolves ``node`` with Ray's node address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from raystream.errors import InvalidConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Security protocols a listener can speak."""
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
NODE_HOST = "node"
ANY_HOSTS = ("", "0.0.0.0")
DIRECT_LISTENER = "DIRECT"
"""The direct path's listener name (``DIRECT:SSL``, ``listener.name.direct.*``)."""
DIRECT_PROTOCOLS = ("PLAINTEXT", "SSL")
"""What the direct path can speak (its callers prove themselves with its token, not
SASL)."""
LISTENER_OPTIONS = (
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.password",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "ssl.endpoint.identification.algorithm",
)
"""The broker options a listener can set for itself as ``listener.name.<name>.<option>``."""
_LISTENER_PREFIX = "listener.name."

_LISTENER = re.compile(  # names as Kafka's: letters, digits, underscores (CLIENT_2)
    r"^(?P<protocol>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)$"
)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One configured listener: name, host as written, port (0: any free) and the
    security protocol it speaks (its name unless the protocol map says otherwise)."""

    name: str
    host: str
    port: int
    security: str = ""

    @property
    def protocol(self) -> str:
        """The listener's name (what Metadata and ``advertised.listeners`` match on)."""
        return self.name

    @property
    def security_protocol(self) -> str:
        """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        return self.security or self.name

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_protocol_map(
    text: str, setting: str = "listener.security.protocol.map"
) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` as a dict (empty text: none).

    Raises:
        InvalidConfigError: an entry is not NAME:PROTOCOL or names an unknown protocol.
    """
    mapping: dict[str, str] = {}
    for entry in (e.strip() for e in (text or "").split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            raise InvalidConfigError(f"{setting} entry {entry!r} is not NAME:PROTOCOL")
        if protocol not in PROTOCOLS:
            raise InvalidConfigError(
                f"{setting} entry {entry!r}: protocol {protocol} is not one of "
                f"{', '.join(PROTOCOLS)}"
            )
        mapping[name.strip().upper()] = protocol
    return mapping


def listener_option(key: str) -> tuple[str, str] | None:
    """The (listener name in upper case, dotted option) a ``listener.name.<name>.<option>``
    key sets, or None for a key of another form. The snake_case spelling
    (``listener_name_external_ssl_keystore_location``) is accepted too.

    Example:
        >>> listener_option("listener.name.external.ssl.keystore.location")
        ('EXTERNAL', 'ssl.keystore.location')

    Raises:
        InvalidConfigError: the key has the form but no listener name, or an option a
            listener cannot set (the message names the key and lists those it can).
    """
    snake = key.replace(".", "_")
    if not snake.startswith(_LISTENER_PREFIX.replace(".", "_")):
        return None
    if key.startswith(_LISTENER_PREFIX):
        name, _, option = key[len(_LISTENER_PREFIX) :].partition(".")
    else:
        rest = snake[len(_LISTENER_PREFIX) :]
        found = [o for o in LISTENER_OPTIONS if rest.endswith("_" + o.replace(".", "_"))]
        option = found[0] if found else ""
        name = rest[: -len(option) - 1] if found else ""
    if not name or option not in LISTENER_OPTIONS:
        raise InvalidConfigError(
            f"config {key!r}: expected listener.name.<listener>.<option>, the option one of "
            f"{', '.join(LISTENER_OPTIONS)}"
        )
    return name.upper(), option


def parse_listeners(
    text: str, setting: str = "listeners", protocol_map: str = ""
) -> list[ListenerSpec]:
    """The listeners of a ``listeners``-style setting (empty text: none).

    Raises:
        InvalidConfigError: an entry does not parse, names an unsupported protocol, has a
            port above 65535, or two entries share a name (the message names it).
    """
    mapping = parse_protocol_map(protocol_map)
    if not isinstance(text, str):
        raise InvalidConfigError(f"{setting}={text!r} must be a string such as PLAINTEXT://:9092")
    specs: list[ListenerSpec] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        match = _LISTENER.match(entry)
        if match is None:
            raise InvalidConfigError(
                f"{setting} entry {entry!r} is not PROTOCOL://host:port (e.g. PLAINTEXT://:9092)"
            )
        protocol = match["protocol"].upper()
        if protocol == DIRECT_LISTENER:
            raise InvalidConfigError(
                f"{setting} entry {entry!r}: the name {DIRECT_LISTENER} is the direct path's "
                "(listener.host); give the Kafka listener another name"
            )
        security = mapping.get(protocol, protocol)
        if security not in PROTOCOLS:
            raise InvalidConfigError(
                f"{setting} entry {entry!r}: protocol {protocol} is not supported "
                f"(supported: {', '.join(PROTOCOLS)}, "
                "or a name that listener.security.protocol.map maps)"
            )
        port = int(match["port"])
        if port > 65535:
            raise InvalidConfigError(f"{setting} entry {entry!r}: port {port} is above 65535")
        if any(s.protocol == protocol for s in specs):
            raise InvalidConfigError(f"{setting} names protocol {protocol} twice")
        specs.append(
            ListenerSpec(
                protocol, match["host"].strip("[]"), port, "" if security == protocol else security
            )
        )
    return specs


def bind_host(spec: ListenerSpec, node_address: str) -> str:
    """The address to bind for ``spec`` on a node whose address is ``node_address``."""
    if spec.host == NODE_HOST:
        return node_address
    return spec.host or "0.0.0.0"


def advertised_host(spec: ListenerSpec, node_address: str) -> str:
    """The address clients are told for ``spec``: a wildcard or ``node`` becomes the
    node's address."""
    if spec.host == NODE_HOST or spec.host in ANY_HOSTS:
        return node_address
    return spec.host


def listener_actor_name(node: str) -> str:
    """The named actor of the Kafka listener on Ray node ``node``."""
    return f"kafka-listener-{node}"
