"""Shared fixtures: one Kafka-protocol broker and one local SparkSession per test session.

Both are started lazily, only by tests that ask for them, and stopped at the end. A test
that asks for one is marked `kafka` / `spark` by `pytest_collection_modifyitems`, so the
quick tier (`-m "not spark and not kafka and not e2e and not promtool"`, README) never
starts either, whether or not the test module remembered its marker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from balancer.app.config import SparkConfig
from tests.kafka_broker import Broker, kafka_broker

# Fixture -> the marker a test that uses it carries.
SERVER_FIXTURES = {"spark": pytest.mark.spark, "kafka": pytest.mark.kafka}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in SERVER_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(SERVER_FIXTURES[fixture])


@pytest.fixture(scope="session")
def kafka() -> Iterator[Broker]:
    """A Kafka-protocol broker: KAFKA_BOOTSTRAP, testcontainers, or tansu on 127.0.0.1."""
    with kafka_broker() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (2 cores, loopback, no UI) shared by every Spark test."""
    from streaming.spark.job import StreamSettings, build_spark

    settings = StreamSettings(
        bootstrap_servers="unused:9092",
        topic="unused",
        checkpoint_dir="unused",
        window_s=60,  # unused too: each test's stream passes its own windows
        slide_s=60,
        watermark_s=0,
        spark_master=os.environ.get("TEST_SPARK_MASTER", "local[2]"),
        num_buckets=4,
        shuffle_partitions=2,
        jvm_options=SparkConfig().jvm_options,
        max_offsets_per_trigger=None,
        trigger_interval_s=30.0,
        max_future_skew_s=600,
        extra_spark_conf=(
            ("spark.driver.memory", "1g"),
            ("spark.sql.streaming.minBatchesToRetain", "10"),
        ),
    )
    session = build_spark(settings)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
