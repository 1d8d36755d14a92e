"""The Kafka stream reader against a real broker, driven directly (no Spark needed).

Spark calls initialOffset / latestOffset / partitions on the driver and read() in tasks; the
tests make the same calls, so the offset logic is checked without a JVM.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from balancer.core.arrow_envelope import encode_envelope
from balancer.core.events import TopicStatsEvent
from streaming.read.kafka_offsets import fetch_high_watermarks
from streaming.read.partition_range import PartitionRange, consumer_config
from streaming.read.source import KafkaRange, KafkaStatsStreamReader, SourceOptions
from streaming.read.summary import ReadSummary
from streaming.shared.packing import events_of
from streaming.shared.schema import PARSED_ARROW_SCHEMA, RAW_ARROW_SCHEMA, RowKind
from tests.kafka_broker import Broker
from tests.stream_events import BASE_MS, encode, event

pytestmark = pytest.mark.kafka


# The stream's settings the source takes (the app passes the config's).
STREAM: dict[str, Any] = {
    "num_buckets": 64, "pane_ms": 60_000, "max_future_skew_ms": 600_000,
    "max_offsets_per_trigger": None,
}  # fmt: skip


def _options(kafka: Broker, topic: str, **options: Any) -> SourceOptions:
    return SourceOptions(kafka.bootstrap_servers, topic, **{**STREAM, **options})


def _reader(kafka: Broker, topic: str, **options: Any) -> KafkaStatsStreamReader:
    return KafkaStatsStreamReader(_options(kafka, topic, **options))


def _produce_in_batches(kafka: Broker, topic: str, counts: dict[int, int]) -> None:
    # Several produce requests per partition: several record batches, which is what makes
    # tansu's ListOffsets "latest" answer wrong (last batch start + 1).
    for partition, n in counts.items():
        for chunk in range(0, n, 7):
            values = [
                encode(event(f"t/ns/p{partition}-{i}", BASE_MS + i))
                for i in range(chunk, min(n, chunk + 7))
            ]
            kafka.produce(topic, values, partition=partition)


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(batches, schema=PARSED_ARROW_SCHEMA).to_pylist()


def test_end_offsets_are_the_fetch_high_water_marks(kafka: Broker) -> None:
    topic = kafka.new_topic(partitions=3, prefix="src")
    _produce_in_batches(kafka, topic, {0: 20, 1: 9, 2: 0})
    reader = _reader(kafka, topic)
    start = reader.initialOffset()
    assert start == {"0": 0, "1": 0, "2": 0}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"0": 20, "1": 9, "2": 0}
    if kafka.kind == "tansu":  # the broker quirk this guards against is really there
        consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
        listed = consumer.end_offsets([TopicPartition(topic, 0)])
        consumer.close()
        assert list(listed.values()) != [20]
    reader.stop()


def test_starting_offsets_latest_skips_what_is_there(kafka: Broker) -> None:
    topic = kafka.new_topic(partitions=2, prefix="src")
    _produce_in_batches(kafka, topic, {0: 5, 1: 3})
    reader = _reader(kafka, topic, starting_offsets="latest")
    start = reader.initialOffset()
    assert start == {"0": 5, "1": 3}
    _produce_in_batches(kafka, topic, {1: 2})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"0": 5, "1": 5}
    assert reader.partitions(start, end) == [KafkaRange(1, 3, 5)]
    reader.stop()


def test_max_offsets_per_trigger_bounds_each_batch(kafka: Broker) -> None:
    topic = kafka.new_topic(partitions=2, prefix="src")
    _produce_in_batches(kafka, topic, {0: 30, 1: 10})
    reader = _reader(kafka, topic, max_offsets_per_trigger=8)
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(8)
    offsets = reader.initialOffset()
    batches = 0
    while True:
        end = reader.latestOffset(offsets, limit)
        if end == offsets:
            break
        assert sum(end[p] - offsets[p] for p in end) <= 8
        offsets, batches = end, batches + 1
    assert offsets == {"0": 30, "1": 10} and batches == 5
    # The engine may still ask for everything (e.g. a no-limit trigger): the source obeys.
    assert reader.latestOffset({"0": 0, "1": 0}, ReadAllAvailable()) == {"0": 30, "1": 10}
    reader.stop()


def test_a_partition_that_lost_its_data_is_read_again_from_offset_0(kafka: Broker) -> None:
    """A broker that came back empty (or a recreated topic) ends before the checkpoint's
    offsets: the source restarts those partitions at 0 instead of waiting, blind, until the
    new offsets pass the old ones (issue 16: Kafka restarts)."""
    topic = kafka.new_topic(partitions=2, prefix="src")
    _produce_in_batches(kafka, topic, {0: 3, 1: 4})
    reader = _reader(kafka, topic)
    checkpointed = {"0": 500, "1": 4}  # partition 0 held 500 records before the loss
    end = reader.latestOffset(checkpointed, ReadAllAvailable())
    assert end == {"0": 0, "1": 4}
    assert reader.partitions(checkpointed, end) == []
    assert reader.latestOffset(end, ReadAllAvailable()) == {"0": 3, "1": 4}
    assert reader.partitions(end, {"0": 3, "1": 4}) == [KafkaRange(0, 0, 3)]
    # With a read limit too.
    assert reader.latestOffset(checkpointed, ReadMaxRows(2)) == {"0": 0, "1": 4}
    reader.stop()


def _summary(batches: list[pa.RecordBatch]) -> ReadSummary:
    rows = _rows(batches)
    assert [r["kind"] for r in rows] == [RowKind.SUMMARY]
    return ReadSummary.from_json(rows[0]["summary"])


def test_partitions_a_recreated_topic_no_longer_has_are_dropped_from_the_offsets(
    kafka: Broker,
) -> None:
    """Issue 32: the topic recreated with 4 -> 2 partitions. The checkpoint's partitions 2
    and 3 are dropped (a partition 3 that comes back later is new: read from offset 0), and
    the batch that drops them reports each in a task of its own that reads nothing."""
    topic = kafka.new_topic(partitions=2, prefix="src")
    _produce_in_batches(kafka, topic, {0: 3, 1: 4})
    reader = _reader(kafka, topic)
    checkpointed = {"0": 50, "1": 50, "2": 50, "3": 50}
    end = reader.latestOffset(checkpointed, ReadAllAvailable())
    assert end == {"0": 0, "1": 0}
    tasks = reader.partitions(checkpointed, end)
    assert tasks == [KafkaRange(2, 50, 50, vanished=True), KafkaRange(3, 50, 50, vanished=True)]
    summary = _summary(list(reader.read(tasks[1])))
    assert (summary.partition, summary.vanished, summary.skipped_offsets) == (3, True, 0)
    assert reader.latestOffset(end, ReadAllAvailable()) == {"0": 3, "1": 4}
    assert reader.partitions(end, {"0": 3, "1": 4}) == [KafkaRange(0, 0, 3), KafkaRange(1, 0, 4)]
    # With a read limit too.
    assert reader.latestOffset(checkpointed, ReadMaxRows(2)) == {"0": 0, "1": 0}
    reader.stop()


def test_a_replayed_batch_does_not_wait_for_a_partition_that_no_longer_exists(
    kafka: Broker,
) -> None:
    """Issue 32: a restart replays the batch planned before the topic lost partitions 2
    and 3. A fresh reader (as after the restart) plans their ranges as vanished: the task
    reads nothing and counts the planned offsets as skipped, instead of timing out."""
    topic = kafka.new_topic(partitions=2, prefix="src")
    _produce_in_batches(kafka, topic, {0: 3})
    reader = _reader(kafka, topic, read_timeout_s=30.0, poll_timeout_ms=200)
    planned_start = {"0": 0, "1": 0, "2": 40, "3": 40}
    planned_end = {"0": 3, "1": 0, "2": 40, "3": 45}
    tasks = reader.partitions(planned_start, planned_end)
    assert tasks == [KafkaRange(0, 0, 3), KafkaRange(3, 40, 45, vanished=True)]
    summary = _summary(list(reader.read(tasks[1])))
    assert (summary.vanished, summary.skipped_offsets, summary.events) == (True, 5, 0)
    reader.stop()


def test_a_partition_range_of_a_partition_the_topic_lacks_ends_at_once(kafka: Broker) -> None:
    """Should a task be planned on a partition that vanished after the driver looked, it
    ends at its first empty poll and counts the range as skipped (waiting would raise the
    read timeout's TimeoutError)."""
    topic = kafka.new_topic(partitions=2, prefix="src")
    config = consumer_config(kafka.bootstrap_servers, {})
    with PartitionRange(config, topic, 3, 2, 5, poll_timeout_s=0.2, read_timeout_s=30) as part:
        assert list(part.batches()) == []
    assert (part.vanished, part.lost_offsets) == (True, 3)


def test_trigger_available_now_stops_at_the_marks_seen_at_start(kafka: Broker) -> None:
    topic = kafka.new_topic(prefix="src")
    _produce_in_batches(kafka, topic, {0: 4})
    reader = _reader(kafka, topic)
    reader.prepareForTriggerAvailableNow()
    _produce_in_batches(kafka, topic, {0: 3})
    assert reader.latestOffset({"0": 0}, ReadAllAvailable()) == {"0": 4}
    reader.stop()


def test_a_read_task_parses_its_range_and_summarises_it(kafka: Broker) -> None:
    topic = kafka.new_topic(prefix="src")
    values = [encode(event("t/ns/a", BASE_MS + i * 1000)) for i in range(6)]
    values[2] = b"not json"
    values[4] = json.dumps(
        {"events": [event("t/ns/b", BASE_MS), event("t/ns/c", BASE_MS + 1)]}
    ).encode()
    kafka.produce(topic, values, partition=0)
    reader = _reader(kafka, topic, batch_rows=2)
    batches = list(reader.read(KafkaRange(0, 1, 5)))  # offsets 1..4
    assert len(batches) > 2  # flushed every `batch_rows` rows, summary last
    rows = _rows(batches)
    kinds = [r["kind"] for r in rows]
    assert kinds.count(RowKind.REJECT) == 1 and kinds[-1] == RowKind.SUMMARY
    packs = [r for r in rows if r["kind"] == RowKind.PACK]
    events = events_of(pa.Table.from_pylist(packs, schema=PARSED_ARROW_SCHEMA))
    assert sorted((e["topic"], e["event_ms"]) for e in events) == [
        ("persistent://t/ns/a", BASE_MS + 1000),
        ("persistent://t/ns/a", BASE_MS + 3000),
        ("persistent://t/ns/b", BASE_MS),
        ("persistent://t/ns/c", BASE_MS + 1),
    ]
    # A pack is located by the first record of its flush (offsets 1..2, then 3..4).
    assert {p["kafka_offset"] for p in packs} == {1, 3}
    assert sum(p["events"] for p in packs) == 4
    reject = next(r for r in rows if r["kind"] == RowKind.REJECT)
    assert (reject["raw"], reject["reason"], reject["kafka_offset"]) == (b"not json", "bad_json", 2)
    summary = ReadSummary.from_json(rows[-1]["summary"])
    assert (summary.start_offset, summary.next_offset, summary.high_watermark) == (1, 5, 6)
    assert (summary.messages, summary.events, summary.consumed) == (4, 4, 5)
    assert summary.rejected == Counter({"bad_json": 1})
    times_ms = [BASE_MS + 1000, BASE_MS + 3000, BASE_MS, BASE_MS + 1]
    assert summary.pane_events == Counter(t - t % 60_000 for t in times_ms)  # pane_ms default
    assert summary.newest_event_ms == BASE_MS + 3000


def test_raw_mode_yields_kafka_coordinates_and_bytes(kafka: Broker) -> None:
    topic = kafka.new_topic(prefix="src")
    kafka.produce(topic, [b"a", b"bb", b"ccc"], partition=0)
    reader = _reader(kafka, topic, raw=True)
    table = pa.Table.from_batches(list(reader.read(KafkaRange(0, 0, 3))), schema=RAW_ARROW_SCHEMA)
    assert table.to_pylist() == [
        {"partition": 0, "offset": 0, "value": b"a"},
        {"partition": 0, "offset": 1, "value": b"bb"},
        {"partition": 0, "offset": 2, "value": b"ccc"},
    ]


def test_a_range_past_the_partitions_end_ends_with_the_records_there_are(kafka: Broker) -> None:
    # A replayed batch planned on records the broker has since lost (it came back empty,
    # new records took offsets 0..2): waiting for offsets 3..5 would time out on every
    # restart. The task ends at the partition's end and skips the rest.
    topic = kafka.new_topic(prefix="src")
    kafka.produce(topic, [b"a", b"b", b"c"], partition=0)
    reader = _reader(kafka, topic, read_timeout_s=30.0, poll_timeout_ms=200, raw=True)
    started = time.monotonic()
    table = pa.Table.from_batches(list(reader.read(KafkaRange(0, 1, 6))), schema=RAW_ARROW_SCHEMA)
    assert table.column("offset").to_pylist() == [1, 2]
    assert time.monotonic() - started < 15  # ended at the partition's end, not a timeout
    # A range wholly past the end: librdkafka resets to the earliest offset, and those
    # records are not the range's.
    gone = pa.Table.from_batches(list(reader.read(KafkaRange(0, 7, 9))), schema=RAW_ARROW_SCHEMA)
    assert gone.num_rows == 0


def test_a_partition_range_counts_the_offsets_the_broker_no_longer_has(kafka: Broker) -> None:
    topic = kafka.new_topic(prefix="src")
    kafka.produce(topic, [b"a", b"b", b"c"], partition=0)
    config = consumer_config(kafka.bootstrap_servers, {})
    with PartitionRange(config, topic, 0, 1, 6, poll_timeout_s=0.2, read_timeout_s=30) as part:
        offsets = [m.offset() for batch in part.batches() for m in batch]
    assert (offsets, part.lost_offsets) == ([1, 2], 3)


def test_a_broker_that_does_not_answer_fails_the_task_clearly() -> None:
    from balancer.kafka.embedded import free_port

    config = consumer_config(f"127.0.0.1:{free_port()}", {})  # nothing listens there
    with (
        PartitionRange(config, "stats", 0, 0, 5, poll_timeout_s=0.2, read_timeout_s=1.0) as part,
        pytest.raises(TimeoutError, match=r"stats-0: no record for 1.0 s .* offsets 0\.\.5"),
    ):
        list(part.batches())


def test_the_reader_pickles_without_its_consumer(kafka: Broker) -> None:
    import pickle

    topic = kafka.new_topic(prefix="src")
    reader = _reader(kafka, topic)
    reader.initialOffset()  # opens the driver-side consumer
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._consumer is None and clone.options == reader.options
    reader.stop()


def _produce_with_markers(
    kafka: Broker, topic: str, before: list[bytes], after: list[bytes]
) -> tuple[int, int]:
    """`before`, a committed and an aborted transaction, then `after`: offsets with gaps.

    A transaction's end is a control record (a marker) that takes an offset but is no data
    record. Returns the partition's end (fetch high-water mark, from kafka-python) and the
    number of data records; their difference is the markers (0 if the broker wrote none).
    """
    from kafka import KafkaProducer

    kafka.produce(topic, before, partition=0)
    producer = KafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers, transactional_id=f"tx-{topic}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, encode(event("t/ns/committed", BASE_MS)), partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, encode(event("t/ns/aborted", BASE_MS)), partition=0)
        producer.flush()  # written, then aborted: read_uncommitted still reads it
        producer.abort_transaction()
    finally:
        producer.close()
    kafka.produce(topic, after, partition=0)
    consumer = _options(kafka, topic).consumer()
    try:
        end = fetch_high_watermarks(consumer, topic, {0: 0})[0]
    finally:
        consumer.close()
    return end, len(kafka.read_all(topic))


def _reference(
    kafka: Broker, topic: str, task: KafkaRange, options: SourceOptions
) -> tuple[list[pa.RecordBatch], ReadSummary, int | None]:
    """The read task's output built record by record from kafka-python's records."""
    from streaming.read.parse import RecordParser

    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, group_id=None)
    tp = TopicPartition(topic, task.partition)
    consumer.assign([tp])
    consumer.seek(tp, task.start)
    records = []
    while consumer.position(tp) < task.end:
        for record in consumer.poll(timeout_ms=500).get(tp, []):
            if record.offset < task.end:
                records.append(record)
    mark = consumer.highwater(tp)
    consumer.close()
    summary = ReadSummary(task.partition, task.start, task.end)
    parser = RecordParser(
        num_buckets=options.num_buckets, slide_ms=options.pane_ms, summary=summary,
        now_ms=int(time.time() * 1000), max_future_skew_ms=options.max_future_skew_ms,
    )  # fmt: skip
    batches = []
    for record in records:
        parser.add(record.value, task.partition, record.offset)
        if len(parser) >= options.batch_rows:
            batches.append(parser.flush())
    if len(parser):
        batches.append(parser.flush())
    return batches, summary, mark


def test_a_read_task_gives_the_rows_of_the_record_by_record_reference(kafka: Broker) -> None:
    """librdkafka in the read task (streaming.read.partition_range) against kafka-python read
    record by record: the same rows and summary, over offsets with transaction markers."""
    topic = kafka.new_topic(prefix="src")
    before = [encode(event(f"t/ns/a{i % 5}", BASE_MS + i * 1000)) for i in range(23)]
    before[7] = b"not json"
    after = [encode(event(f"t/ns/b{i % 3}", BASE_MS + 60_000 + i)) for i in range(11)]
    end, records = _produce_with_markers(kafka, topic, before, after)
    assert records == len(before) + 2 + len(after)
    if kafka.kind == "tansu":
        assert end > records  # the gaps this test is about are really there
    options = _options(kafka, topic, batch_rows=4, num_buckets=4)
    for task in (KafkaRange(0, 0, end), KafkaRange(0, 5, end - 3), KafkaRange(0, 24, end)):
        got = list(KafkaStatsStreamReader(options).read(task))
        want, want_summary, want_mark = _reference(kafka, topic, task, options)
        assert _rows(got[:-1]) == _rows(want)
        summary = ReadSummary.from_json(_rows(got[-1:])[0]["summary"])
        assert summary.high_watermark == want_mark == end
        summary.high_watermark = want_summary.high_watermark = None
        assert summary == want_summary


@pytest.mark.parametrize("codec", ["lz4", "gzip"])
def test_a_read_task_reads_compressed_batches_as_the_reference_does(
    kafka: Broker, codec: str
) -> None:
    """The collector compresses its batches (collector.compression): librdkafka inflates
    them to the same rows as kafka-python, envelopes (JSON and Arrow) and single events
    alike."""
    topic = kafka.new_topic(prefix="src-" + codec)
    singles = [encode(event(f"t/ns/s{i % 7}", BASE_MS + i)) for i in range(40)]
    envelopes = [
        json.dumps({"events": [json.loads(encode(event(f"t/ns/e{i}-{j}", BASE_MS + j)))
                               for j in range(25)]}).encode()
        for i in range(6)
    ]  # fmt: skip
    arrow = [
        # Short names, as a producer might send them: normalised on the read task's fast path.
        encode_envelope(
            [TopicStatsEvent(**event(f"t/ns/a{i}-{j}", BASE_MS + j)) for j in range(25)]
        )
        for i in range(4)
    ]
    records = [*singles, *envelopes, b"not json", *arrow, b"\xff\xff\xff\xffnot arrow"]
    events_per_record = [1] * len(singles) + [25] * len(envelopes) + [0] + [25] * 4 + [0]
    kafka.produce(topic, records, partition=0, compression_type=codec)
    end = len(records)
    options = _options(kafka, topic, batch_rows=16, num_buckets=4)
    for task in (KafkaRange(0, 0, end), KafkaRange(0, 33, end - 1)):
        got = list(KafkaStatsStreamReader(options).read(task))
        want, want_summary, _ = _reference(kafka, topic, task, options)
        assert _rows(got[:-1]) == _rows(want)
        summary = ReadSummary.from_json(_rows(got[-1:])[0]["summary"])
        summary.high_watermark = want_summary.high_watermark = None
        assert summary == want_summary
        assert summary.events == sum(events_per_record[task.start : task.end])


def test_raw_mode_skips_the_markers_as_the_reference_does(kafka: Broker) -> None:
    topic = kafka.new_topic(prefix="src")
    end, _ = _produce_with_markers(kafka, topic, [b"a", b"b"], [b"c"])
    reader = _reader(kafka, topic, raw=True, batch_rows=2)
    batches = list(reader.read(KafkaRange(0, 0, end)))
    assert [b.num_rows for b in batches] == [2, 2, 1]  # batch_rows rows at a time
    got = pa.Table.from_batches(batches, schema=RAW_ARROW_SCHEMA).to_pylist()
    want = [
        {"partition": r.partition, "offset": r.offset, "value": r.value}
        for r in kafka.read_all(topic)
    ]
    assert got == want


def test_a_read_task_that_stalls_after_a_marker_fails_with_partition_and_offsets(
    kafka: Broker,
) -> None:
    topic = kafka.new_topic(prefix="src")
    end, _ = _produce_with_markers(kafka, topic, [b"a"], [])  # a marker last
    reader = _reader(kafka, topic, read_timeout_s=1.0, poll_timeout_ms=200)
    with pytest.raises(TimeoutError) as info:
        list(reader.read(KafkaRange(0, 1, end + 4)))
    assert str(info.value) == (
        f"{topic}-0: no record for 1.0 s while reading offsets {end}..{end + 4}"
    )
