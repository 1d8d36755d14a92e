"""`pulsar-balancer record`: both topics' records in a time range, exported to a directory
that replays exactly as the Kafka range does (issue 44, point 1). Against the project's
Kafka-protocol broker (`kafka` fixture)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer

from balancer.app.cli import main
from balancer.app.commands.record import parse_time
from balancer.app.replay.recording import DirRecording, KafkaRecording
from balancer.app.replay.recording_dir import FORMAT_VERSION, read_manifest
from balancer.collector.sink import KafkaEventSink
from balancer.core.arrow_envelope import encode_envelope
from balancer.core.context_record import context_key, encode_context
from balancer.core.events import TopicStatsEvent
from tests.app.replay.test_record_contexts import context
from tests.configs import machine_ok_config
from tests.kafka_broker import Broker

STEP_MS = 10_000
STATS = 30  # stats messages, one every STEP_MS, over 3 partitions
ROUNDS = 5  # context rounds of two clusters, one a minute


@dataclass(frozen=True)
class Topics:
    bootstrap: str
    stats: str
    context: str
    base_ms: int  # the first stats message's timestamp, on a minute

    def kafka(self, since_ms: int | None = None, until_ms: int | None = None) -> KafkaRecording:
        return KafkaRecording(
            bootstrap_servers=self.bootstrap,
            stats_topic=self.stats,
            context_topic=self.context,
            since_ms=since_ms,
            until_ms=until_ms,
        )


def arrow_value(i: int) -> bytes:
    """An Arrow envelope (the collector's default): bytes that are not UTF-8."""
    name = f"persistent://t/ns-{i % 5}/x-{i}"
    return encode_envelope([TopicStatsEvent("c", name, 1_767_225_600_000, *(1.0,) * 4, *(i,) * 5)])


@pytest.fixture(scope="module")
def topics(kafka: Broker) -> Iterator[Topics]:
    # Recent stamps: a real Kafka's retention would delete week-old ones.
    base_ms = (int(time.time() * 1000) - 3_600_000) // 60_000 * 60_000
    made = Topics(kafka.bootstrap_servers, kafka.new_topic(3, "stats"), "", base_ms)
    made = Topics(made.bootstrap, made.stats, kafka.new_topic(1, "ctx"), base_ms)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers)
    try:
        for i in range(STATS):
            producer.send(
                made.stats,
                key=None if i % 4 == 0 else f"ns-{i % 5}".encode(),
                value=arrow_value(i) if i % 2 else f'{{"events":[{i}]}}'.encode(),
                partition=i % 3,
                timestamp_ms=base_ms + i * STEP_MS,
            )
        # A context record that does not parse, between rounds 1 and 2.
        producer.send(made.context, key=b"a", value=b"garbage", timestamp_ms=base_ms + 90_000)
        producer.flush()
    finally:
        producer.close()
    # The rounds through the collector's own sink (what `run` publishes).
    sink = KafkaEventSink.connect(
        bootstrap_servers=[kafka.bootstrap_servers], topic=made.stats, context_topic=made.context
    )
    try:
        for r in range(ROUNDS):
            round_ms = base_ms + r * 60_000
            for cluster in ("a", "b"):
                ctx = context(cluster, round_ms)
                sink.publish_context(
                    key=context_key(cluster), value=encode_context(ctx), timestamp_ms=round_ms
                )
        sink.flush()
    finally:
        sink.close()
    assert sink.counts.contexts_lost == 0
    yield made


def config_file(tmp_path: Path, topics: Topics) -> Path:
    data = machine_ok_config(tmp_path)
    data["kafka"] = {
        "bootstrap_servers": topics.bootstrap,
        "stats_topic": topics.stats,
        "context_topic": topics.context,
    }
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def record(tmp_path: Path, topics: Topics, to: Path, *extra: str) -> int:
    return main(["record", "--to", str(to), "--config", str(config_file(tmp_path, topics)), *extra])


def test_a_recorded_directory_reads_exactly_as_its_kafka_range(
    tmp_path: Path, topics: Topics, capsys: pytest.CaptureFixture[str]
) -> None:
    since_ms = topics.base_ms + 25_000
    until_ms = topics.base_ms + 245_000
    to = tmp_path / "rec"
    assert record(tmp_path, topics, to, "--since", str(since_ms), "--until", str(until_ms)) == 0
    out = capsys.readouterr().out
    kafka = topics.kafka(since_ms, until_ms)
    disk = DirRecording(to)
    from_kafka = list(kafka.stats_messages())
    assert list(disk.stats_messages()) == from_kafka
    # Exactly the stats stamped in [since, until): messages 3..24, in timestamp order.
    assert [m.timestamp_ms for m in from_kafka] == [
        topics.base_ms + i * STEP_MS for i in range(3, 25)
    ]
    assert {m.partition for m in from_kafka} == {0, 1, 2}
    assert [m.key for m in from_kafka][:2] == [b"ns-3", None]  # keys as they were, none too
    # Values as they were, Arrow envelopes (binary) and JSON alike.
    assert [m.value for m in from_kafka][:2] == [arrow_value(3), b'{"events":[4]}']
    contexts = list(kafka.contexts())
    assert list(disk.contexts()) == contexts
    # Rounds 1..4 of a and b (round 0 is before since), the bad record counted, skipped.
    assert [(c.cluster, c.round_ms) for c in contexts] == [
        (cl, topics.base_ms + r * 60_000) for r in range(1, ROUNDS) for cl in ("a", "b")
    ]
    assert contexts[0] == context("a", topics.base_ms + 60_000)
    assert disk.context_counts == kafka.context_counts
    assert dict(disk.context_counts.rejected) == {"bad_json": 1}
    manifest = read_manifest(to)
    assert manifest["format_version"] == FORMAT_VERSION
    assert (manifest["since_ms"], manifest["until_ms"]) == (since_ms, until_ms)
    assert manifest["stats"]["topic"] == topics.stats
    assert manifest["stats"]["messages"] == 22
    assert manifest["stats"]["partitions"] == [0, 1, 2]
    assert manifest["context"]["messages"] == 9
    assert manifest["contexts_read"] == 8
    assert manifest["contexts_rejected"] == {"bad_json": 1}
    assert manifest["tool_version"]
    assert "22 stats messages" in out and "8 context records" in out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_iso_8601_and_epoch_ms_give_the_same_range(tmp_path: Path, topics: Topics) -> None:
    since_ms = topics.base_ms + 60_000
    until_ms = topics.base_ms + 120_000
    iso = [datetime.fromtimestamp(t / 1000, UTC).isoformat() for t in (since_ms, until_ms)]
    assert record(tmp_path, topics, tmp_path / "iso", "--since", iso[0], "--until", iso[1]) == 0
    by_ms = ("--since", str(since_ms), "--until", str(until_ms))
    assert record(tmp_path, topics, tmp_path / "ms", *by_ms) == 0
    iso_messages = list(DirRecording(tmp_path / "iso").stats_messages())
    assert iso_messages == list(DirRecording(tmp_path / "ms").stats_messages())
    assert [m.timestamp_ms for m in iso_messages] == [
        topics.base_ms + i * STEP_MS for i in range(6, 12)
    ]


def test_without_a_range_everything_is_recorded(tmp_path: Path, topics: Topics) -> None:
    to = tmp_path / "all"
    to.mkdir()  # an empty directory is fine
    assert record(tmp_path, topics, to) == 0
    disk = DirRecording(to)
    assert len(list(disk.stats_messages())) == STATS
    assert len(list(disk.contexts())) == 2 * ROUNDS
    assert (disk.since_ms, disk.until_ms) == (None, None)


def test_a_directory_not_empty_is_never_overwritten(
    tmp_path: Path, topics: Topics, capsys: pytest.CaptureFixture[str]
) -> None:
    to = tmp_path / "rec"
    to.mkdir()
    (to / "notes.txt").write_text("mine")
    assert record(tmp_path, topics, to) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not empty" in err
    assert [p.name for p in to.iterdir()] == ["notes.txt"]
    assert (to / "notes.txt").read_text() == "mine"
    file_target = tmp_path / "a-file"
    file_target.write_text("x")
    assert record(tmp_path, topics, file_target) == 2
    assert file_target.read_text() == "x"


def test_a_failed_record_leaves_nothing_behind(
    tmp_path: Path, topics: Topics, kafka: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = Topics(topics.bootstrap, "no-such-stats-topic", topics.context, topics.base_ms)
    to = tmp_path / "out" / "rec"
    assert record(tmp_path, missing, to) == 2
    assert "no-such-stats-topic" in capsys.readouterr().err
    assert not to.exists()
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_until_must_follow_since(tmp_path: Path, topics: Topics) -> None:
    to = tmp_path / "rec"
    assert record(tmp_path, topics, to, "--since", "2000", "--until", "1000") == 2
    assert not to.exists()


def test_times_are_iso_8601_or_epoch_ms() -> None:
    assert parse_time("1700000000000", "--since") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z", "--since") == 1_700_000_000_000
    assert parse_time("2023-11-14T23:13:20+01:00", "--since") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20", "--since") == 1_700_000_000_000  # naive: UTC
    with pytest.raises(ValueError, match="--until"):
        parse_time("yesterday", "--until")


def test_a_directory_without_a_manifest_is_no_recording(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"manifest\.json"):
        DirRecording(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a pulsar-balancer-recording"):
        DirRecording(tmp_path)


def test_with_moves_off_there_is_no_context_and_record_says_so(
    tmp_path: Path, topics: Topics, capsys: pytest.CaptureFixture[str]
) -> None:
    # No balancer read load reports: the context topic was never written (nor created).
    moves_off = Topics(topics.bootstrap, topics.stats, "never-created-context", topics.base_ms)
    to = tmp_path / "rec"
    assert record(tmp_path, moves_off, to) == 0
    assert "no context records" in capsys.readouterr().out
    disk = DirRecording(to)
    assert len(list(disk.stats_messages())) == STATS
    assert list(disk.contexts()) == []
    assert "moves.enabled" in disk.context_counts.describe()
    manifest = read_manifest(to)
    assert manifest["context"]["messages"] == 0 and manifest["context"]["partitions"] == []
