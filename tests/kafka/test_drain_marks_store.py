"""Drain marks on a compacted Kafka topic (issue 43, point 2), against the tests' real
Kafka-protocol broker: round trip, a new instance (a restarted or standby balancer) sees the
same marks, bad records counted and skipped, reads incremental and bounded."""

from __future__ import annotations

import logging
import uuid

import pytest

from balancer.core.drain_marks import changed, new_mark
from balancer.kafka.drain_marks import KafkaDrainMarks
from tests.kafka_broker import Broker

pytestmark = pytest.mark.kafka

B1, B2 = "b1:8080", "b2:8080"


def _store(kafka: Broker, topic: str, **kwargs: int) -> KafkaDrainMarks:
    return KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic, **kwargs)


def _topic() -> str:
    return f"marks-{uuid.uuid4().hex[:10]}"


def test_marks_round_trip_and_a_new_instance_sees_them(kafka: Broker) -> None:
    topic = _topic()
    with _store(kafka, topic) as writer:
        first = new_mark("east", B1, by="ops", at_ms=1_000)
        writer.write([first, new_mark("east", B2, by="pod b2", at_ms=1_001)])
        writer.write([changed(first, "cleared", by="ops", at_ms=2_000)])
        assert writer.draining("east") == {B2}  # applied locally at once
    # A restarted balancer, or the standby: a new instance reads them from the topic.
    with _store(kafka, topic) as reader:
        assert reader.draining("east") == frozenset()  # nothing read yet
        assert reader.refresh() is True
        assert reader.draining("east") == {B2}
        assert reader.draining("west") == frozenset()
        marks = {m.broker: m for m in reader.marks("east")}
        assert (marks[B1].state, marks[B1].by, marks[B1].marked_by) == ("cleared", "ops", "ops")
        assert (marks[B2].by, marks[B2].at_ms) == ("pod b2", 1_001)
        assert reader.records_read == 3


def test_a_refresh_reads_only_what_was_written_since(kafka: Broker) -> None:
    topic = _topic()
    with _store(kafka, topic) as reader, _store(kafka, topic) as writer:
        writer.write([new_mark("east", B1, by="ops", at_ms=1)])
        reader.refresh()
        assert reader.records_read == 1
        assert reader.refresh() is True  # nothing new: nothing read again
        assert reader.records_read == 1
        writer.write([new_mark("east", B2, by="ops", at_ms=2)])
        reader.refresh()
        assert reader.records_read == 2
        assert reader.draining("east") == {B1, B2}


def test_a_read_is_bounded_and_catches_up_over_calls(kafka: Broker) -> None:
    topic = _topic()
    with _store(kafka, topic) as writer:
        writer.write([new_mark("east", f"b{i}:8080", by="ops", at_ms=i) for i in range(5)])
    with _store(kafka, topic, max_records=2) as reader:
        done = [reader.refresh() for _ in range(3)]
        assert done[-1] is True and done[0] is False
        assert len(reader.draining("east")) == 5


def test_bad_records_are_counted_logged_and_skipped(
    kafka: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic()
    with _store(kafka, topic) as writer:
        writer.write([new_mark("east", B1, by="ops", at_ms=1)])
    kafka.produce(topic, [b"not json"], key=b"east/b9:8080", partition=0)
    kafka.produce(topic, [b'{"state": "draining"}'], key=b"east/b8:8080", partition=0)
    with _store(kafka, topic) as writer:
        writer.write([new_mark("east", B2, by="ops", at_ms=2)])
    with caplog.at_level(logging.WARNING), _store(kafka, topic) as reader:
        assert reader.refresh() is True
        assert reader.bad_records == 2
        assert reader.draining("east") == {B1, B2}  # the good ones on both sides are read
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 2 and "offset 1" in skipped[0] and "not JSON" in skipped[0]
