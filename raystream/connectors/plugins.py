"""Connector plugins: which class a ``connector.class`` names.

A config names its connector the ways Kafka Connect accepts: by its short class name
(``"FileStreamSource"``), by a dotted path (``"raystream.connectors.file.FileStreamSource"``),
or, for the built-ins, by the Kafka class name it stands for. Lookup order:

1. classes given to ``rs.connectors.Workers(plugins=...)`` (in-process, e.g. tests);
2. :data:`BUILTINS`, raystream's own connectors: ``{short name: "module:Class"}``,
   imported on first use so that listing plugins imports nothing heavy. The helpers that
   ship connectors add their line here (for example
   ``"FileStreamSource": "raystream.connectors.file:FileStreamSource"``); :data:`ALIASES`
   maps Kafka's class names to these short names;
3. third-party connectors registered through the Python entry point group
   ``raystream.connectors`` (``name = "package.module:Class"`` in their packaging
   metadata), found by their entry point name or their class's short or dotted name;
4. any importable dotted path ``package.module.Class``.

Nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

from raystream.connectors.api import Connector, SinkConnector, SourceConnector
from raystream.errors import InvalidConfigError

ENTRY_POINT_GROUP = "raystream.connectors"

#: raystream's own connectors: short class name -> "module:Class" (imported lazily).
BUILTINS: dict[str, str] = {
    "FileStreamSource": "raystream.connectors.file:FileStreamSourceConnector",
    "FileStreamSink": "raystream.connectors.file:FileStreamSinkConnector",
    "DirectorySource": "raystream.connectors.file:DirectorySourceConnector",
    "DirectorySink": "raystream.connectors.file:DirectorySinkConnector",
    "DataLakeSink": "raystream.connectors.datalake:DataLakeSinkConnector",
    "HttpSource": "raystream.connectors.http:HttpSource",
    "PostgresSource": "raystream.connectors.postgres:PostgresSource",
    "PostgresSink": "raystream.connectors.postgres:PostgresSink",
    "MirrorSourceConnector": "raystream.mirror.connectors:MirrorSourceConnector",
    "MirrorCheckpointConnector": "raystream.mirror.connectors:MirrorCheckpointConnector",
    "MirrorHeartbeatConnector": "raystream.mirror.connectors:MirrorHeartbeatConnector",
}

#: Kafka's (or MirrorMaker 2's) class names of connectors that raystream ships.
ALIASES: dict[str, str] = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": "FileStreamSource",
    "org.apache.kafka.connect.file.FileStreamSinkConnector": "FileStreamSink",
    "org.apache.kafka.connect.mirror.MirrorSourceConnector": "MirrorSourceConnector",
    "org.apache.kafka.connect.mirror.MirrorCheckpointConnector": "MirrorCheckpointConnector",
    "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector": "MirrorHeartbeatConnector",
}


def _load(target: str) -> Any:
    """The object a ``module:attr`` or ``module.attr`` path names."""
    module, sep, attr = target.partition(":")
    if not sep:
        module, _, attr = target.rpartition(".")
    if not module or not attr:
        raise ImportError(f"{target!r} is not a module:Class path")
    value: Any = import_module(module)
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def resolve(class_name: str, extra: Mapping[str, type] | None = None) -> type[Connector]:
    """The connector class ``class_name`` names (see the module docstring for the order).

    Raises:
        InvalidConfigError: nothing of that name is found, or it is not a Connector.
    """
    if not isinstance(class_name, str) or not class_name:
        raise InvalidConfigError(f"connector.class must be a class name, got {class_name!r}")
    name = ALIASES.get(class_name, class_name)
    found: Any = None
    if extra:
        found = extra.get(name) or next(
            (c for c in extra.values() if f"{c.__module__}.{c.__qualname__}" == name), None
        )
    if found is None:
        for table in (BUILTINS, _entry_points()):
            target = table.get(name) or next(
                (t for t in table.values() if t.replace(":", ".") == name), None
            )
            if target is None:
                short = name.rsplit(".", 1)[-1]
                target = next((t for t in table.values() if t.rsplit(":", 1)[-1] == short), None)
            if target is not None:
                found = _load(target)
                break
    if found is None and "." in name:
        try:
            found = _load(name)
        except (ImportError, AttributeError):
            found = None
    if found is None:
        known = ", ".join(sorted(plugin_names(extra))) or "none"
        raise InvalidConfigError(
            f"connector.class {class_name!r}: no such connector plugin (known: {known})"
        )
    if not (isinstance(found, type) and issubclass(found, Connector)):
        raise InvalidConfigError(
            f"connector.class {class_name!r} names {found!r}, which is not a Connector subclass"
        )
    return found


def plugin_names(extra: Mapping[str, type] | None = None) -> list[str]:
    """Every plugin name known without importing anything: extras, built-ins, entry points."""
    return sorted({*(extra or {}), *BUILTINS, *_entry_points()})


def connector_type(cls: type[Connector]) -> str:
    """``"source"`` or ``"sink"``, as Kafka Connect's REST API names the kinds."""
    if issubclass(cls, SourceConnector):
        return "source"
    if issubclass(cls, SinkConnector):
        return "sink"
    return "unknown"


def describe_plugins(extra: Mapping[str, type] | None = None) -> list[dict[str, str]]:
    """``GET /connector-plugins``: ``[{"class", "type", "version"}]`` of every plugin
    that imports (one that does not is left out: its dependencies are missing)."""
    result = []
    for name in plugin_names(extra):
        try:
            cls = resolve(name, extra)
            version = cls.version(cls.__new__(cls))
        except Exception:  # a plugin whose imports fail is not usable here
            continue
        result.append(
            {
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "type": connector_type(cls),
                "version": str(version),
            }
        )
    return result
