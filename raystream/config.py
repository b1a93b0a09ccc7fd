"""Configuration objects shared by every role.

Each role (topic, producer, consumer, broker defaults) has a frozen dataclass whose
fields are Kafka's option names with ``.`` replaced by ``_``: ``retention.ms`` is
``retention_ms``. Values are validated on construction, and the error names the bad
key and value. Nothing here reads environment variables.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from raystream.errors import InvalidConfigError
from raystream.groups.assignors import ASSIGNORS

if TYPE_CHECKING:
    from raystream.kafka.listeners import ListenerSpec
    from raystream.security.tls import TlsSettings
    from raystream.wire import DirectListener

C = TypeVar("C", bound="KafkaConfig")


@dataclasses.dataclass(frozen=True)
class KafkaConfig:
    """Base of the config dataclasses: conversion from and to Kafka's dotted names."""

    @classmethod
    def field_names(cls) -> set[str]:
        """The snake_case option names this config accepts."""
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_kafka(cls: type[C], options: Mapping[str, Any] | None = None, **kwargs: Any) -> C:
        """Build from a mapping keyed by Kafka's dotted names or our snake_case names.

        Raises:
            InvalidConfigError: a key is unknown or a value is invalid.
        """
        return cls().with_options(options, **kwargs)

    def with_options(self: C, options: Mapping[str, Any] | None = None, **kwargs: Any) -> C:
        """A copy with the given options (dotted or snake_case names) changed."""
        merged = {**dict(options or {}), **kwargs}
        known = self.field_names()
        changes: dict[str, Any] = {}
        for key, value in merged.items():
            if not isinstance(key, str):
                raise InvalidConfigError(f"config key {key!r} is not a string")
            name = key.replace(".", "_")
            if name not in known:
                raise InvalidConfigError(unknown_option(type(self).__name__, key, known))
            changes[name] = _coerce(key, value, getattr(self, name))
        return dataclasses.replace(self, **changes)

    def to_kafka(self) -> dict[str, Any]:
        """The options under Kafka's dotted names."""
        return {f.name.replace("_", "."): getattr(self, f.name) for f in dataclasses.fields(self)}


CONNECTION_HINTS = {
    name: "a raystream client reaches its cluster through cluster= (rs.connect(address=...)), "
    "not through Kafka's connection options"
    for name in ("bootstrap_servers", "security_protocol", "sasl_mechanism", "ssl_context")
}
"""Kafka client options that have no place in a raystream client, with why."""


def unknown_option(owner: str, key: str, known: Iterable[str]) -> str:
    """The message for an unknown option ``key``: it names the key and the closest known
    option (in the key's own spelling, dotted or snake_case), or lists them all.

    Example:
        >>> unknown_option("ProducerConfig", "linger", ["linger_ms", "acks"])
        "unknown ProducerConfig key 'linger' (did you mean 'linger_ms'?)"
    """
    hint = CONNECTION_HINTS.get(key.replace(".", "_"))
    if hint is not None:
        return f"unknown {owner} key {key!r}: {hint}"
    dotted = "." in key
    spell = (lambda name: name.replace("_", ".")) if dotted else (lambda name: name)
    names = sorted(known)
    if not names:
        return f"unknown {owner} key {key!r}: {owner} takes no options"
    close = difflib.get_close_matches(key.replace(".", "_").lower(), names, n=1, cutoff=0.6)
    if close:
        return f"unknown {owner} key {key!r} (did you mean {spell(close[0])!r}?)"
    return f"unknown {owner} key {key!r}; known keys: " + ", ".join(map(spell, names))


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Convert a value given as text (CLI, Kafka-style maps) to the option's type."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidConfigError(f"config {key}={value!r}: expected true or false")
    if isinstance(default, int):
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise InvalidConfigError(f"config {key}={value!r}: expected an integer")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"config {key}={value!r}: expected an integer") from None
    if isinstance(default, str) and not isinstance(value, str):
        raise InvalidConfigError(f"config {key}={value!r}: expected a string")
    return value


def require(condition: bool, owner: str, name: str, value: Any, expected: str) -> None:
    """Raise InvalidConfigError naming the option and value unless ``condition`` holds."""
    if not condition:
        raise InvalidConfigError(f"{owner} {name.replace('_', '.')}={value!r}: {expected}")


@dataclasses.dataclass(frozen=True)
class BrokerConfig(KafkaConfig):
    """Cluster-wide server settings, fixed when the controller starts.

    Attributes:
        data_dir: directory on every node under which replicas keep their logs
            (Kafka's ``log.dirs``); the controller keeps its metadata log there too.
        default_replication_factor: replication factor when create_topic gives none.
        min_insync_replicas: default for topics that do not set it.
        log_retention_check_interval_ms: how often replicas apply retention/compaction.
        log_flush_scheduler_interval_ms: how often replicas check ``flush.ms``.
        replica_lag_time_max_ms: a follower not caught up for this long leaves the ISR.
        auto_leader_rebalance_enable: move leadership back to preferred replicas by
            itself (periodically and when a node joins).
        leader_imbalance_check_interval_seconds: how often that check runs.
        offsets_topic_num_partitions: partitions of ``__consumer_offsets`` (created on
            first use). Kafka's default is 50; here every partition replica is an actor
            process, so the default is small.
        offsets_topic_replication_factor: its replication factor, capped at the number
            of live nodes when the topic is created (a one-node cluster gets 1, so a
            laptop works out of the box; Kafka would refuse instead).
        transaction_state_log_num_partitions: partitions of ``__transaction_state``
            (created on first use, like the offsets topic; Kafka's default is 50).
        transaction_state_log_replication_factor: its replication factor, capped at the
            number of live nodes.
        transaction_abort_timed_out_transaction_cleanup_interval_ms: how often the
            transaction coordinator looks for transactions past their timeout (Kafka:
            10 s; 1 s here, the check being a scan of a dict in memory).
        listener_host: where replica actors listen for the direct path of produce and
            fetch calls (see :mod:`raystream.wire`; Kafka's ``listeners``, on an
            ephemeral port per replica): ``127.0.0.1`` (the default: clients on the
            replica's machine), ``node`` (the Ray node's address, for clients on other
            nodes), another address, or empty to send every call through Ray. A client
            that cannot reach the address uses Ray calls.
        max_replicas_per_node: most replicas (each an actor process) one node holds;
            topic creations and partition additions beyond it are refused up front. 0
            (the default) derives it from each node's memory (about 128 MiB per
            replica: see :func:`raystream.controller.placement.replica_limits`).
        listeners: Kafka-protocol listeners, one actor per Ray node, for unmodified
            Kafka clients and tools (``PLAINTEXT://127.0.0.1:9092``; host ``node``: the
            node's address; port 0: any free port). Empty (the default): none. See
            :mod:`raystream.kafka.listeners`.
        advertised_listeners: what Metadata answers tell Kafka clients to connect to,
            when that differs from ``listeners`` (NAT, a proxy). Empty: as bound.
        authorizer_class_name: any non-empty value turns on ACL authorization of
            Kafka-protocol requests (Kafka's ``authorizer.class.name``; Kafka's
            ``org.apache.kafka.metadata.authorizer.StandardAuthorizer`` is accepted like
            any other name). Empty (the default): every request is allowed. See
            :mod:`raystream.security.acls`.
        super_users: principals allowed everything, separated by ``;``
            (``User:admin;User:ops``).
        allow_everyone_if_no_acl_found: with the authorizer on, allow a resource that no
            ACL matches (Kafka's default and this one: false, refuse it).
        listener_security_protocol_map: ``NAME:PROTOCOL,...`` for listeners named
            otherwise than their security protocol (Kafka's).
        ssl_keystore_location, ssl_keystore_type, ssl_keystore_password,
            ssl_key_location, ssl_key_password, ssl_truststore_location,
            ssl_truststore_type, ssl_truststore_password, ssl_client_auth: the TLS of
            ``SSL`` and ``SASL_SSL`` listeners and of the direct path (see
            :mod:`raystream.security.tls`); reloaded when the files change. Store types:
            ``PEM`` (the default) or ``PKCS12``; JKS is refused with the ``keytool``
            command that converts it. The truststore also holds the CAs raystream
            trusts as a client of the direct path.
        ssl_principal_mapping_rules: Kafka's rules mapping a client certificate's
            subject to a principal (``DEFAULT``: ``User:<the whole DN>``).
        ssl_endpoint_identification_algorithm: ``https`` (Kafka's default since 2.0):
            raystream as a TLS client (of the direct path) checks that the server's
            certificate names the host it connected to; empty turns that off (the
            certificate is still checked against the truststore).
        listener_overrides: Kafka's per-listener settings, given as
            ``listener.name.<name>.<option>`` keys (``listener.name.external.ssl.
            keystore.location``), one of
            :data:`~raystream.kafka.listeners.LISTENER_OPTIONS` for one listener, over
            the broker-wide option (:meth:`listener_option`). Kept as
            ``((name, option), value)`` pairs; :meth:`to_kafka` gives the keys back.

    The direct path (``listener.host``) is a listener named ``DIRECT`` in these
    settings, the way Kafka's operators already name an inter-broker listener: with
    ``listener.security.protocol.map`` holding ``DIRECT:SSL`` its sockets speak TLS,
    with the broker-wide ``ssl.*`` files or ``listener.name.direct.ssl.*`` ones, and
    every raystream process connecting checks the server's certificate (against
    ``ssl.truststore.location``, its host name unless
    ``ssl.endpoint.identification.algorithm`` is empty). A separate switch
    (``direct.ssl.enabled``) would be a name no Kafka operator knows; the protocol map
    and listener prefix are what they already use to secure one listener and not
    another. The token the path has always required is sent inside TLS; client
    certificates are not asked for there (``ssl.client.auth`` applies to the Kafka
    listeners).
        sasl_enabled_mechanisms: what SASL listeners offer, among PLAIN,
            SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER. PLAIN is checked against the
            user's stored SCRAM credential.
        sasl_oauthbearer_jwks_endpoint_url: the JWKS OAUTHBEARER tokens are
            checked against: the identity provider's ``https://`` endpoint, or a file
            (path or ``file:`` URL); ``..._expected_audience``, ``..._expected_issuer``
            and ``..._sub_claim_name`` as Kafka's.
        sasl_oauthbearer_jwks_endpoint_refresh_ms: how long a JWKS fetched from an
            ``https://`` endpoint is used before it is fetched again (Kafka's default,
            an hour; a token naming a key the JWKS lacks fetches it at once). See
            :mod:`raystream.security.oauth`.
        sasl_oauthbearer_validator_class: ``module:Class`` of another token validator
            (see :mod:`raystream.security.oauth`). Empty: the JWKS validator.
        connections_max_reauth_ms: a SASL session's lifetime (KIP-368); a client that
            does not re-authenticate in time is disconnected. 0: no limit.
    """

    data_dir: str = ""
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = 1000
    replica_lag_time_max_ms: int = 30_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    offsets_topic_num_partitions: int = 1
    offsets_topic_replication_factor: int = 3
    transaction_state_log_num_partitions: int = 1
    transaction_state_log_replication_factor: int = 3
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 1000
    listener_host: str = "127.0.0.1"
    max_replicas_per_node: int = 0
    listeners: str = ""
    advertised_listeners: str = ""
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    listener_security_protocol_map: str = ""
    ssl_keystore_location: str = ""
    ssl_keystore_type: str = "PEM"
    ssl_keystore_password: str = dataclasses.field(default="", repr=False)
    ssl_key_location: str = ""
    ssl_key_password: str = dataclasses.field(default="", repr=False)
    ssl_truststore_location: str = ""
    ssl_truststore_type: str = "PEM"
    ssl_truststore_password: str = dataclasses.field(default="", repr=False)
    ssl_client_auth: str = "none"
    ssl_principal_mapping_rules: str = "DEFAULT"
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512"
    sasl_oauthbearer_jwks_endpoint_url: str = ""
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = 3_600_000
    sasl_oauthbearer_expected_audience: str = ""
    sasl_oauthbearer_expected_issuer: str = ""
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_validator_class: str = ""
    connections_max_reauth_ms: int = 0
    listener_overrides: tuple[tuple[tuple[str, str], str], ...] = dataclasses.field(
        default=(), repr=False
    )

    def with_options(self, options: Mapping[str, Any] | None = None, **kwargs: Any) -> BrokerConfig:
        """A copy with options changed; ``listener.name.<name>.<option>`` keys set that
        option for that listener (see :attr:`listener_overrides`)."""
        from raystream.kafka.listeners import listener_option

        merged = {**dict(options or {}), **kwargs}
        overrides = dict(self.listener_overrides)
        plain: dict[str, Any] = {}
        for key, value in merged.items():
            found = listener_option(key) if isinstance(key, str) else None
            if found is None:
                plain[key] = value
            else:
                overrides[found] = _coerce(key, value, "")
        if overrides != dict(self.listener_overrides):
            plain["listener_overrides"] = tuple(sorted(overrides.items()))
        return super().with_options(plain)

    def to_kafka(self) -> dict[str, Any]:
        """The options under Kafka's dotted names, each listener override as its own
        ``listener.name.<name>.<option>`` key."""
        options = super().to_kafka()
        del options["listener.overrides"]
        for (name, option), value in self.listener_overrides:
            options[f"listener.name.{name.lower()}.{option}"] = value
        return options

    def listener_option(self, listener: str, option: str) -> str:
        """``option`` (one of :data:`~raystream.kafka.listeners.LISTENER_OPTIONS`) as
        listener ``listener`` has it: its own ``listener.name.`` setting, else the
        broker-wide one."""
        for key, value in self.listener_overrides:
            if key == (listener.upper(), option):
                return value
        return getattr(self, option.replace(".", "_"))

    def tls_settings(self, listener: str) -> TlsSettings:
        """The server TLS settings of listener ``listener`` (its overrides applied)."""
        from raystream.security.tls import TlsSettings

        def get(option: str) -> str:
            return self.listener_option(listener, option)

        return TlsSettings(
            get("ssl.keystore.location"),
            get("ssl.key.location"),
            get("ssl.key.password"),
            get("ssl.truststore.location"),
            get("ssl.client.auth"),
            get("ssl.keystore.type"),
            get("ssl.keystore.password"),
            get("ssl.truststore.type"),
            get("ssl.truststore.password"),
        )

    def direct_listener(self) -> DirectListener:
        """How actors serve the direct path: ``listener.host``, and with ``DIRECT:SSL``
        in the protocol map, the server's TLS (no client certificates asked for) and
        how clients check it (see the class doc)."""
        from raystream.kafka.listeners import DIRECT_LISTENER, parse_protocol_map
        from raystream.security.tls import ClientTlsSettings
        from raystream.wire import DirectListener

        protocol = parse_protocol_map(self.listener_security_protocol_map).get(
            DIRECT_LISTENER, "PLAINTEXT"
        )
        if protocol != "SSL" or not self.listener_host:
            return DirectListener(self.listener_host)
        server = dataclasses.replace(
            self.tls_settings(DIRECT_LISTENER), truststore_location="", client_auth="none"
        )
        client = ClientTlsSettings(
            self.listener_option(DIRECT_LISTENER, "ssl.truststore.location"),
            self.listener_option(DIRECT_LISTENER, "ssl.endpoint.identification.algorithm"),
            self.listener_option(DIRECT_LISTENER, "ssl.truststore.type"),
            self.listener_option(DIRECT_LISTENER, "ssl.truststore.password"),
        )
        return DirectListener(self.listener_host, server, client)

    def __post_init__(self) -> None:
        from raystream.errors import InvalidRequestError
        from raystream.kafka.listeners import parse_listeners
        from raystream.security.acls import parse_super_users

        try:
            parse_super_users(self.super_users)
        except InvalidRequestError as error:
            raise InvalidConfigError(
                f"broker config super.users={self.super_users!r}: {error}"
            ) from None

        specs = parse_listeners(self.listeners, "listeners", self.listener_security_protocol_map)
        bound = {s.protocol for s in specs}
        advertised = parse_listeners(
            self.advertised_listeners, "advertised_listeners", self.listener_security_protocol_map
        )
        self._check_security({s.security_protocol for s in specs})
        self._check_listener_tls(specs)
        for spec in advertised:
            require(
                spec.protocol in bound,
                "broker config",
                "advertised_listeners",
                self.advertised_listeners,
                f"advertises {spec.protocol}, which listeners does not open",
            )
        require(
            self.max_replicas_per_node >= 0,
            "broker config",
            "max_replicas_per_node",
            self.max_replicas_per_node,
            "must be >= 0 (0: derived from node memory)",
        )
        for name in (
            "default_replication_factor",
            "min_insync_replicas",
            "log_retention_check_interval_ms",
            "log_flush_scheduler_interval_ms",
            "replica_lag_time_max_ms",
            "leader_imbalance_check_interval_seconds",
            "offsets_topic_num_partitions",
            "offsets_topic_replication_factor",
            "transaction_state_log_num_partitions",
            "transaction_state_log_replication_factor",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        ):
            value = getattr(self, name)
            require(value >= 1, "broker config", name, value, "must be >= 1")

    def _check_security(self, protocols: set[str]) -> None:
        """The security settings the configured listeners need, checked now (the
        message names the key) rather than when a listener first starts."""
        from raystream.security.principal import parse_mapping_rules
        from raystream.security.sasl import OAUTHBEARER, parse_mechanisms
        from raystream.security.tls import CLIENT_AUTH, ENDPOINT_IDENTIFICATION, store_type

        parse_mapping_rules(self.ssl_principal_mapping_rules)
        for store in ("keystore", "truststore"):  # JKS refused now, with how to convert
            type_, location = (getattr(self, f"ssl_{store}_{o}") for o in ("type", "location"))
            try:
                store_type(f"ssl.{store}.type", type_, location)
            except InvalidConfigError as error:
                raise InvalidConfigError(f"broker config {error}") from None
        require(
            self.ssl_endpoint_identification_algorithm in ENDPOINT_IDENTIFICATION,
            "broker config",
            "ssl_endpoint_identification_algorithm",
            self.ssl_endpoint_identification_algorithm,
            "expected 'https' (check the server's certificate names its host) or '' (do not)",
        )
        require(
            self.ssl_client_auth in CLIENT_AUTH,
            "broker config",
            "ssl_client_auth",
            self.ssl_client_auth,
            f"expected one of {', '.join(CLIENT_AUTH)}",
        )
        require(
            self.connections_max_reauth_ms >= 0,
            "broker config",
            "connections_max_reauth_ms",
            self.connections_max_reauth_ms,
            "must be >= 0 (0: no limit)",
        )
        require(
            self.sasl_oauthbearer_jwks_endpoint_refresh_ms > 0,
            "broker config",
            "sasl_oauthbearer_jwks_endpoint_refresh_ms",
            self.sasl_oauthbearer_jwks_endpoint_refresh_ms,
            "must be > 0",
        )
        mechanisms = parse_mechanisms(self.sasl_enabled_mechanisms)
        if protocols & {"SASL_PLAINTEXT", "SASL_SSL"}:
            require(
                bool(mechanisms),
                "broker config",
                "sasl_enabled_mechanisms",
                self.sasl_enabled_mechanisms,
                "SASL listeners need at least one mechanism",
            )
            if OAUTHBEARER in mechanisms:
                require(
                    bool(
                        self.sasl_oauthbearer_jwks_endpoint_url
                        or self.sasl_oauthbearer_validator_class
                    ),
                    "broker config",
                    "sasl_oauthbearer_jwks_endpoint_url",
                    self.sasl_oauthbearer_jwks_endpoint_url,
                    "OAUTHBEARER needs a JWKS URL or file (or sasl.oauthbearer.validator.class)",
                )
                require(
                    not self.sasl_oauthbearer_jwks_endpoint_url.startswith("http://"),
                    "broker config",
                    "sasl_oauthbearer_jwks_endpoint_url",
                    self.sasl_oauthbearer_jwks_endpoint_url,
                    "use https (keys fetched in clear could be replaced on the way)",
                )

    def _check_listener_tls(self, specs: list[ListenerSpec]) -> None:
        """Each listener's own TLS settings and the direct path's, checked now: the
        overrides name listeners that exist and hold valid values, every TLS listener
        has its certificate, and the direct path speaks what it can."""
        from raystream.kafka.listeners import (
            DIRECT_LISTENER,
            DIRECT_PROTOCOLS,
            LISTENER_OPTIONS,
            TLS_PROTOCOLS,
            parse_protocol_map,
        )
        from raystream.security.principal import parse_mapping_rules
        from raystream.security.tls import CLIENT_AUTH, ClientTlsSettings

        names = {s.name for s in specs} | {DIRECT_LISTENER}
        for entry in self.listener_overrides:
            try:
                (name, option), value = entry
            except (TypeError, ValueError):
                raise InvalidConfigError(
                    f"broker config listener_overrides entry {entry!r}: expected "
                    "((listener name, option), value)"
                ) from None
            key = f"listener.name.{str(name).lower()}.{option}"
            if option not in LISTENER_OPTIONS or not isinstance(value, str):
                raise InvalidConfigError(
                    f"broker config {key}={value!r}: expected a string value of one of "
                    f"{', '.join(LISTENER_OPTIONS)}"
                )
            if name not in names:
                raise InvalidConfigError(
                    f"broker config {key}: listeners has no listener {name} (it has "
                    f"{', '.join(sorted(names - {DIRECT_LISTENER})) or 'none'}; "
                    f"{DIRECT_LISTENER.lower()} is the direct path)"
                )
            if option == "ssl.principal.mapping.rules":
                parse_mapping_rules(value)
        direct = parse_protocol_map(self.listener_security_protocol_map).get(
            DIRECT_LISTENER, "PLAINTEXT"
        )
        require(
            direct in DIRECT_PROTOCOLS,
            "broker config",
            "listener_security_protocol_map",
            self.listener_security_protocol_map,
            f"the direct path ({DIRECT_LISTENER}) speaks {' or '.join(DIRECT_PROTOCOLS)} "
            "(its token authenticates callers, not SASL)",
        )
        require(
            direct == "PLAINTEXT" or bool(self.listener_host),
            "broker config",
            "listener_security_protocol_map",
            self.listener_security_protocol_map,
            f"maps {DIRECT_LISTENER} to {direct}, but listener.host is empty (no direct path)",
        )
        overrides = dict(self.listener_overrides)
        client_auth = overrides.get((DIRECT_LISTENER, "ssl.client.auth"), "none")
        require(
            client_auth == "none",
            "broker config",
            "listener.name.direct.ssl.client.auth",
            client_auth,
            "the direct path asks no client certificate (its token authenticates callers)",
        )
        tls_listeners = {s.name for s in specs if s.security_protocol in TLS_PROTOCOLS}
        if direct == "SSL":
            tls_listeners.add(DIRECT_LISTENER)
        for name in sorted(tls_listeners | {name for name, _ in overrides}):
            settings = self.tls_settings(name)
            if name == DIRECT_LISTENER:  # the broker-wide ssl.client.auth is not its
                settings = dataclasses.replace(settings, client_auth="none")
            identification = self.listener_option(name, "ssl.endpoint.identification.algorithm")
            try:
                if name in tls_listeners:
                    settings.check()
                elif settings.client_auth not in CLIENT_AUTH:
                    raise InvalidConfigError(
                        f"ssl.client.auth={settings.client_auth!r}: expected one of "
                        f"{', '.join(CLIENT_AUTH)}"
                    )
                ClientTlsSettings(endpoint_identification_algorithm=identification).check()
            except InvalidConfigError as error:
                raise InvalidConfigError(f"broker config, listener {name}: {error}") from None


ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
"""The ``acks`` values a producer accepts, normalized to 0, 1 or -1 (all in-sync replicas)."""

COMPRESSION_TYPES = (None, "lz4", "zstd")
"""Codecs a producer may ask the leader to store its batches with (None: uncompressed)."""


def normalize_acks(acks: Any) -> int:
    """``acks`` as 0, 1 or -1 ("all").

    Raises:
        InvalidRequestError: ``acks`` is none of 0, 1, "all", -1 (or "0", "1", "-1").
    """
    from raystream.errors import InvalidRequestError

    try:
        normalized = None if isinstance(acks, (bool, float)) else ACKS.get(acks)
    except TypeError:  # unhashable
        normalized = None
    if normalized is None:
        raise InvalidRequestError(f"producer config acks={acks!r}: use 0, 1, 'all' or -1")
    return normalized


@dataclasses.dataclass(frozen=True)
class ProducerConfig(KafkaConfig):
    """A producer's settings (kafka-python's names; Kafka's defaults).

    Attributes:
        acks: 0 (do not wait), 1 (the leader appended) or -1 (every in-sync replica has
            it); "all", "0", "1" and "-1" are accepted and normalized to these ints.
        linger_ms: how long a batch waits for more records before it is sent.
        batch_size: bytes of records that make a batch full (sent without lingering).
        compression_type: None, "lz4" or "zstd"; the leader stores each batch with it.
        enable_idempotence: the producer gets a producer id and numbers its records
            per partition, so the leader writes each batch once whatever the retries
            and keeps up to ``max_in_flight_requests_per_connection`` (<= 5) calls per
            partition in order. Applies with acks 1 and "all" (acks=0 has no answers
            to sequence by); off, a partition has one call in flight and a retry may
            write twice.
        transactional_id: makes the producer transactional (implies idempotence): the
            id survives restarts, so a new producer with it fences the old one.
        transaction_timeout_ms: the coordinator aborts a transaction open this long
            (its producer is presumed gone).
        retries: how many times a batch is resent after a retriable error.
        delivery_timeout_ms: upper bound from ``send()`` to success or failure,
            retries included.
        request_timeout_ms: how long one produce request may take.
        max_request_size: bytes one request (and so one record) may have at most.
        partitioner: None (Kafka's default) or a kafka-python style callable.
        key_serializer, value_serializer: callables applied in ``send()``.
        max_in_flight_requests_per_connection: unanswered produce calls per partition
            with idempotence (at most 5, as in Kafka); without it one, whatever this
            says, since the leader could append pipelined calls in any order.
        retry_backoff_ms: pause before a retry (after a metadata refresh).
        buffer_memory: bytes of unsent records before ``send()`` blocks.
        max_block_ms: how long ``send()`` blocks for buffer space before it fails.
        metadata_max_age_ms: how old the producer's topic metadata may grow before it
            is fetched again, even without an error, so that partitions added to a
            topic receive records (keys spread over the new count, as in Kafka).
        client_id: names the producer to the cluster; client quotas
            (``producer_byte_rate``) set for it hold (see :mod:`raystream.client.quotas`).
    """

    acks: int = -1
    linger_ms: int = 5
    batch_size: int = 65_536
    compression_type: str | None = None
    enable_idempotence: bool = True
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    retries: int = 2_147_483_647
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_request_size: int = 1_048_576
    partitioner: Any = None
    key_serializer: Any = None
    value_serializer: Any = None
    max_in_flight_requests_per_connection: int = 5
    retry_backoff_ms: int = 100
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    metadata_max_age_ms: int = 300_000
    client_id: str = "raystream-producer"

    def __post_init__(self) -> None:
        object.__setattr__(self, "acks", normalize_acks(self.acks))
        owner = "producer config"
        for name, low in (
            ("linger_ms", 0),
            ("batch_size", 1),
            ("retries", 0),
            ("delivery_timeout_ms", 1),
            ("request_timeout_ms", 1),
            ("max_request_size", 1),
            ("max_in_flight_requests_per_connection", 1),
            ("retry_backoff_ms", 0),
            ("buffer_memory", 1),
            ("max_block_ms", 0),
            ("transaction_timeout_ms", 1),
            ("metadata_max_age_ms", 0),
        ):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool),
                owner,
                name,
                value,
                "expected an integer",
            )
            require(value >= low, owner, name, value, f"must be >= {low}")
        require(
            isinstance(self.enable_idempotence, bool),
            owner,
            "enable_idempotence",
            self.enable_idempotence,
            "expected true or false",
        )
        require(
            not self.enable_idempotence or self.max_in_flight_requests_per_connection <= 5,
            owner,
            "max_in_flight_requests_per_connection",
            self.max_in_flight_requests_per_connection,
            "must be <= 5 with enable_idempotence (the leader remembers 5 batches per producer)",
        )
        require(
            self.compression_type in COMPRESSION_TYPES,
            owner,
            "compression_type",
            self.compression_type,
            "use None, 'lz4' or 'zstd'",
        )
        require(
            self.transactional_id is None or isinstance(self.transactional_id, str),
            owner,
            "transactional_id",
            self.transactional_id,
            "expected a string or None",
        )
        require(
            self.transactional_id is None or (self.enable_idempotence and self.acks == -1),
            owner,
            "transactional_id",
            self.transactional_id,
            "needs enable_idempotence=True and acks='all'",
        )
        for name in ("partitioner", "key_serializer", "value_serializer"):
            value = getattr(self, name)
            require(value is None or callable(value), owner, name, value, "must be callable")
        require(
            isinstance(self.client_id, str) and self.client_id != "",
            owner,
            "client_id",
            self.client_id,
            "expected a non-empty string",
        )

    def with_options(
        self, options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> ProducerConfig:
        """A copy with options changed; ``acks`` may be given as "all" or text."""
        merged = {**dict(options or {}), **kwargs}
        if "acks" in merged:
            merged["acks"] = normalize_acks(merged["acks"])
        return super().with_options(merged)


AUTO_OFFSET_RESET = ("earliest", "latest", "none")
"""auto_offset_reset values (kafka-python's old "smallest"/"largest" are aliases)."""
AUTO_OFFSET_RESET_ALIASES = {"smallest": "earliest", "largest": "latest"}
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclasses.dataclass(frozen=True)
class ConsumerConfig(KafkaConfig):
    """A consumer's settings (kafka-python's names and defaults).

    Attributes:
        group_id: the consumer group (None: no group, nothing to commit).
        group_instance_id: makes the member static: a restart with the same id within
            ``session_timeout_ms`` gets its partitions back without a rebalance.
        client_id: names the member in the group (member ids start with it) and the
            consumer to the cluster: client quotas (``consumer_byte_rate``) set for it
            hold (see :mod:`raystream.client.quotas`).
        auto_offset_reset: where a partition without a valid position starts:
            "earliest", "latest" or "none" (raise OffsetOutOfRangeError).
        enable_auto_commit, auto_commit_interval_ms: periodic commits (with groups).
        isolation_level: "read_uncommitted" or "read_committed".
        max_poll_records: records one ``poll()`` returns at most.
        session_timeout_ms: a member silent this long is evicted, its partitions move.
        heartbeat_interval_ms: how often the member heartbeats (well below the above).
        max_poll_interval_ms: a member whose application does not call ``poll()`` for
            this long leaves the group (and rejoins at its next poll).
        partition_assignment_strategy: a strategy name, or a list of names in
            preference order: "range", "roundrobin", "sticky", "cooperative-sticky".
        fetch_max_wait_ms: how long a leader holds a fetch that finds no new data.
        fetch_min_bytes: the leader answers a fetch once this much data is there.
        fetch_max_bytes, max_partition_fetch_bytes: bytes one fetch may return; each
            fetch reads one partition, so the smaller of the two applies (a batch larger
            than that is still returned whole).
        consumer_timeout_ms: iteration stops after this long without a record
            (default: never).
        request_timeout_ms: how long offset lookups may take, retries included.
        retry_backoff_ms: pause before retrying after a retriable error.
        metadata_max_age_ms: how often a subscription looks for new partitions.
    """

    group_id: str | None = None
    group_instance_id: str | None = None
    client_id: str = "raystream-consumer"
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    isolation_level: str = "read_uncommitted"
    max_poll_records: int = 500
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: Any = "cooperative-sticky"
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    consumer_timeout_ms: float = math.inf
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000

    def __post_init__(self) -> None:
        owner = "consumer config"
        reset = self.auto_offset_reset
        if isinstance(reset, str):
            reset = AUTO_OFFSET_RESET_ALIASES.get(reset.lower(), reset.lower())
        require(
            reset in AUTO_OFFSET_RESET,
            owner,
            "auto_offset_reset",
            self.auto_offset_reset,
            "use 'earliest', 'latest' or 'none'",
        )
        object.__setattr__(self, "auto_offset_reset", reset)
        require(
            self.isolation_level in ISOLATION_LEVELS,
            owner,
            "isolation_level",
            self.isolation_level,
            "use 'read_uncommitted' or 'read_committed'",
        )
        require(
            self.group_id is None or (isinstance(self.group_id, str) and self.group_id != ""),
            owner,
            "group_id",
            self.group_id,
            "expected a non-empty string or None",
        )
        for name in ("group_instance_id", "client_id"):
            value = getattr(self, name)
            require(
                value is None or (isinstance(value, str) and value != ""),
                owner,
                name,
                value,
                "expected a non-empty string",
            )
        strategies = self.partition_assignment_strategy
        if isinstance(strategies, str):
            strategies = [strategies]
        require(
            isinstance(strategies, (list, tuple))
            and len(strategies) > 0
            and all(s in ASSIGNORS for s in strategies),
            owner,
            "partition_assignment_strategy",
            self.partition_assignment_strategy,
            f"use one or a list of {', '.join(ASSIGNORS)}",
        )
        object.__setattr__(self, "partition_assignment_strategy", list(strategies))
        require(
            isinstance(self.enable_auto_commit, bool),
            owner,
            "enable_auto_commit",
            self.enable_auto_commit,
            "expected true or false",
        )
        for name, low in (
            ("auto_commit_interval_ms", 1),
            ("max_poll_records", 1),
            ("session_timeout_ms", 1),
            ("heartbeat_interval_ms", 1),
            ("max_poll_interval_ms", 1),
            ("fetch_max_wait_ms", 0),
            ("fetch_min_bytes", 0),
            ("fetch_max_bytes", 1),
            ("max_partition_fetch_bytes", 1),
            ("request_timeout_ms", 1),
            ("retry_backoff_ms", 0),
            ("metadata_max_age_ms", 0),
        ):
            value = getattr(self, name)
            require(_is_int(value), owner, name, value, "expected an integer")
            require(value >= low, owner, name, value, f"must be >= {low}")
        timeout = self.consumer_timeout_ms
        require(
            isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout >= 0,
            owner,
            "consumer_timeout_ms",
            timeout,
            "expected a number of milliseconds >= 0 (or float('inf'))",
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
