"""The framework's part of a connector config, checked when a connector is created or
updated, as Kafka Connect's ``ConnectorConfig`` (and its source and sink kinds) checks
it: the keys the framework reads and those Kafka Connect passes through are accepted
where Kafka accepts them, a value Kafka would refuse is refused, and a setting the
connector cannot honour is refused with the reason (never accepted and ignored).

======================================  ==============================================
keys                                    checked, and what they do here
======================================  ==============================================
``name``, ``connector.class``           the connector and its plugin
``tasks.max``                           an integer >= 1
``topics`` / ``topics.regex``           a sink's input: exactly one of them
``key.converter[.*]``,                  built as the tasks build them: an unknown
``value.converter[.*]``                 class or a bad setting is refused now
``transforms[.*]``, ``predicates[.*]``  built as the tasks build them
``errors.*``                            the error policy, built as the tasks build it;
                                        a sink's dead letter queue topic must not be
                                        one of its topics (Kafka's rule)
``exactly.once.support``                ``requested`` (the default) or ``required``,
                                        any case; ``required`` needs a connector that
                                        can honour it: a source whose records and
                                        offsets share a transaction (KIP-618), a sink
                                        that stores its offsets with its data
``transaction.boundary[.interval.ms]``  sources: ``poll``, ``interval`` or
                                        ``connector`` (any case), the last for a
                                        source that defines its own boundaries only
``config.action.reload``                ``none`` or ``restart`` (any case)
``offsets.storage.topic``               a non-empty name; accepted, and offsets stay
                                        in the group's offsets topic (as standalone
                                        Kafka Connect, where it has no effect)
``header.converter[.*]``                accepted; headers travel as bytes, which is
                                        what Kafka's default converter gives a sink
``consumer.override.*``,                accepted (Kafka's default override policy is
``producer.override.*``,                ``All``); a sink's consumer takes
``admin.override.*``                    ``group.id``, ``auto.offset.reset``,
                                        ``isolation.level`` and ``max.poll.records``
``topic.creation.*``                    accepted; a source's topics are not created
                                        for it (create them first)
======================================  ==============================================

Anything else is the connector's own: its ``validate`` checks it, and keys no one
reads are ignored, as Kafka Connect ignores them. Kafka Connect does not define
``exactly.once.support`` and ``transaction.boundary`` for sinks and ignores them there;
here ``transaction.boundary`` is ignored on a sink too, but ``exactly.once.support=
required`` is a promise, so a sink that cannot keep it says so. Pure: no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping

from raystream.connectors.api import Connector, SinkConnector, SourceConnector
from raystream.connectors.transform_api import list_setting
from raystream.errors import InvalidConfigError

EXACTLY_ONCE_SUPPORT = ("requested", "required")
"""``exactly.once.support`` values (KIP-618; any case)."""
TRANSACTION_BOUNDARIES = ("poll", "interval", "connector")
"""``transaction.boundary`` values of a source (KIP-618; any case)."""
CONFIG_ACTION_RELOAD = ("none", "restart")
"""``config.action.reload`` values (any case)."""


def exactly_once_required(config: Mapping[str, str]) -> bool:
    """Whether ``exactly.once.support`` is ``required`` (any case)."""
    return config.get("exactly.once.support", "requested").strip().lower() == "required"


def transaction_boundary(config: Mapping[str, str]) -> str:
    """A source's ``transaction.boundary`` in lower case (default ``poll``)."""
    return config.get("transaction.boundary", "poll").strip().lower()


def check_connector_config(name: str, connector: Connector, config: Mapping[str, str]) -> None:
    """Check the framework's keys of connector ``name``'s ``config`` (strings), for
    ``connector`` (an instance of its plugin, not started); see the module doc.

    Raises:
        InvalidConfigError: a value Kafka Connect would refuse or a setting the
            connector cannot honour; the message names the key and why.
    """
    from raystream.connectors.runtime import Pipeline  # it reads this module's helpers

    kind = type(connector).__name__
    tasks_max = config.get("tasks.max", "1")
    if not tasks_max.strip().isdigit() or int(tasks_max) < 1:
        raise InvalidConfigError(f"tasks.max={tasks_max!r}: expected an integer >= 1")
    eos = config.get("exactly.once.support", "requested")
    if eos.strip().lower() not in EXACTLY_ONCE_SUPPORT:
        raise InvalidConfigError(
            f"exactly.once.support={eos!r}: expected {' or '.join(EXACTLY_ONCE_SUPPORT)}"
        )
    reload = config.get("config.action.reload", "restart")
    if reload.strip().lower() not in CONFIG_ACTION_RELOAD:
        raise InvalidConfigError(
            f"config.action.reload={reload!r}: expected {' or '.join(CONFIG_ACTION_RELOAD)}"
        )
    if "offsets.storage.topic" in config and not config["offsets.storage.topic"].strip():
        raise InvalidConfigError("offsets.storage.topic='': expected a topic name")
    if isinstance(connector, SourceConnector):
        _check_source(name, kind, connector, config)
    if isinstance(connector, SinkConnector):
        _check_sink(name, kind, connector, config, list_setting(config, "topics"))
    Pipeline(config, name, 0)  # converters, transforms, predicates, errors.*: as tasks


def _check_source(
    name: str, kind: str, connector: SourceConnector, config: Mapping[str, str]
) -> None:
    boundary = transaction_boundary(config)
    if boundary not in TRANSACTION_BOUNDARIES:
        raise InvalidConfigError(
            f"transaction.boundary={config['transaction.boundary']!r}: expected one of "
            f"{', '.join(TRANSACTION_BOUNDARIES)}"
        )
    interval = config.get("transaction.boundary.interval.ms", "0").strip()
    if not interval.isdigit():
        raise InvalidConfigError(
            f"transaction.boundary.interval.ms={interval!r}: expected an integer >= 0"
        )
    if exactly_once_required(config) and not connector.exactly_once_support(config):
        raise InvalidConfigError(
            f"connector {name!r}: exactly.once.support=required, but {kind} cannot give "
            "exactly-once delivery (its tasks' records and source offsets cannot share a "
            "transaction, KIP-618); use exactly.once.support=requested"
        )
    if boundary == "connector" and not connector.can_define_transaction_boundaries(config):
        raise InvalidConfigError(
            f"connector {name!r}: transaction.boundary=connector, but {kind} does not "
            "define transaction boundaries; use poll or interval"
        )


def _check_sink(
    name: str,
    kind: str,
    connector: SinkConnector,
    config: Mapping[str, str],
    topics: list[str],
) -> None:
    if bool(topics) == bool(config.get("topics.regex", "").strip()):
        raise InvalidConfigError(
            f"connector {name!r}: a sink connector needs exactly one of topics and topics.regex"
        )
    dlq = config.get("errors.deadletterqueue.topic.name", "").strip()
    if dlq and dlq in topics:
        raise InvalidConfigError(
            f"errors.deadletterqueue.topic.name={dlq!r} is one of the sink's topics: its "
            "failed records would come back to it"
        )
    if exactly_once_required(config) and not connector.exactly_once_support(config):
        raise InvalidConfigError(
            f"connector {name!r}: exactly.once.support=required, but {kind} writes at "
            "least once: it does not store its offsets with its data, so what it wrote "
            "after its last offset commit is written again after a crash; use "
            "exactly.once.support=requested, or a sink that stores its offsets with its "
            "data (DirectorySink, DataLakeSink, PostgresSink)"
        )
