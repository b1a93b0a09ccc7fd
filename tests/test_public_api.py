"""The public names of ``import raystream as rs`` are exactly the documented API."""

from __future__ import annotations

import subprocess
import sys

import raystream as rs

API = {
    "AclBinding",
    "AclBindingFilter",
    "Admin",
    "Cluster",
    "Consumer",
    "ConsumerGroup",
    "ConsumerRecord",
    "GroupDescription",
    "Log",
    "LogConfig",
    "PartitionDescription",
    "Producer",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "__version__",
    "connect",
    "connectors",
    "data",
    "errors",
    "mirror",
    "spark",
    "streams",
}

ERRORS = {
    "RaystreamError",
    "UnknownTopicOrPartitionError",
    "TopicAlreadyExistsError",
    "InvalidTopicError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "NotLeaderError",
    "LeaderNotAvailableError",
    "NotEnoughReplicasError",
    "RecordTooLargeError",
    "OffsetOutOfRangeError",
    "CommitFailedError",
    "RebalanceInProgressError",
    "ProducerFencedError",
    "OutOfOrderSequenceError",
    "InvalidTxnStateError",
    "AuthorizationError",
    "RaystreamTimeoutError",
    "RecordDeserializationError",
    "PartitionOutOfRangeError",
}

CALLER_MISTAKES = {"InvalidConfigError", "InvalidRequestError", "PartitionOutOfRangeError"}
"""Errors for a caller's bad input: never retriable (retrying cannot fix the input)."""


def test_exported_names_are_the_api() -> None:
    assert set(rs.__all__) == API
    for name in API:
        assert getattr(rs, name) is not None


def test_every_documented_error_exists_and_says_if_it_is_retriable() -> None:
    for name in ERRORS:
        error = getattr(rs.errors, name)
        assert issubclass(error, rs.errors.RaystreamError)
        assert isinstance(error.retriable, bool)
        assert name.endswith("Error")


def test_errors_for_a_callers_mistakes_say_not_retriable() -> None:
    for name in CALLER_MISTAKES | {"RecordDeserializationError"}:
        error = getattr(rs.errors, name)
        assert not error.retriable and not error.invalid_metadata, name
    assert issubclass(rs.errors.PartitionOutOfRangeError, rs.errors.InvalidRequestError)


def test_importing_raystream_starts_neither_ray_nor_spark() -> None:
    code = (
        "import sys, raystream; "
        "assert not {'ray', 'pyspark', 'raydp'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_storage_engine_and_pure_logic_import_without_ray() -> None:
    pure = [
        "raystream.log",
        "raystream.controller.placement",
        "raystream.replication.election",
        "raystream.replication.isr",
        "raystream.replication.truncation",
        "raystream.groups.assignors",
        "raystream.groups.group",
        "raystream.client.partitioner",
        "raystream.transactions.metadata",
        "raystream.wire",
        "raystream.connectors.worker",
        "raystream.connectors.storage",
        "raystream.connectors.plugins",
        "raystream.connectors.connector_config",
        "raystream.properties",
        "raystream.security.tls",
        "raystream.security.oauth",
    ]
    code = f"import sys, {', '.join(pure)}; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_spark_and_data_export_functions_whatever_was_imported_first() -> None:
    code = (
        "import raystream.spark.source, raystream.spark.microbatch, raystream.data.reader; "
        "import raystream as rs, inspect; "
        "names = [rs.spark.session, rs.spark.stop, rs.spark.stream, rs.spark.read_topic, "
        "rs.spark.write_topic, rs.spark.release, rs.data.read_topic, rs.data.write_topic, "
        "rs.data.iter_topic]; "
        "assert all(inspect.isfunction(f) for f in names), names"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
