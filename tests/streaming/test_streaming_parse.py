"""Kafka records -> Arrow rows (pure): events packed and typed, every reject kept with a reason."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from balancer.core.buckets import topic_bucket
from balancer.core.hashing import hash_position
from streaming.read.parse import MAX_DEAD_LETTER_RAW_BYTES, RecordParser, parse_records
from streaming.read.summary import ReadSummary
from streaming.shared.packing import events_of
from streaming.shared.schema import PARSED_ARROW_SCHEMA, PARSED_SPARK_SCHEMA, RowKind
from tests.stream_events import BASE_MS, encode, event

GOOD = event("t/ns/a", BASE_MS)
SLIDE_MS = 60_000


def parse(values: list[bytes | None]) -> tuple[list[dict[str, Any]], ReadSummary]:
    summary = ReadSummary(partition=3, start_offset=100, next_offset=100 + len(values))
    parser = RecordParser(num_buckets=16, slide_ms=SLIDE_MS, summary=summary)
    for i, value in enumerate(values):
        parser.add(value, 3, 100 + i)
    batch = parser.flush()
    assert batch.schema == PARSED_ARROW_SCHEMA
    return batch.to_pylist(), summary


def test_a_valid_event_becomes_a_typed_row_in_a_pack() -> None:
    (row,), summary = parse([encode(GOOD)])
    topic = "persistent://t/ns/a"
    assert row["kind"] == RowKind.PACK
    assert (row["bucket"], row["events"]) == (topic_bucket(topic, 16), 1)
    assert row["event_time"].timestamp() * 1000 == BASE_MS  # the pack's newest event
    assert row["pane_start"] == BASE_MS - BASE_MS % SLIDE_MS
    assert (row["kafka_partition"], row["kafka_offset"]) == (3, 100)
    assert row["raw"] is None and row["reason"] is None
    (ev,) = events_of(pa.Table.from_pylist([row], schema=PARSED_ARROW_SCHEMA))
    assert (ev["cluster"], ev["namespace"], ev["topic"]) == ("c1", "t/ns", topic)
    assert (ev["position"], ev["event_ms"]) == (hash_position(topic), BASE_MS)
    assert (ev["msg_rate_in"], ev["storage_size"], ev["consumer_count"]) == (1.0, 1000, 1)
    assert (summary.events, summary.consumed) == (1, 1)
    assert summary.pane_events == Counter({BASE_MS - BASE_MS % SLIDE_MS: 1})
    assert summary.newest_event_ms == BASE_MS


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "bad_json"),
        (b"{", "bad_json"),
        (b"\xc3\x28", "bad_encoding"),
        (b'"a string"', "not_an_object"),
        (encode({k: v for k, v in GOOD.items() if k != "cluster"}), "missing_field"),
        (encode({**GOOD, "extra": 1}), "unknown_field"),
        (encode({**GOOD, "consumerCount": "2"}), "wrong_type"),
        (b'{"msgRateIn": NaN}', "bad_json"),
        (encode({**GOOD, "storageSize": -1}), "negative_value"),
        (encode({**GOOD, "topic": "a/b/c/d"}), "invalid_topic"),
        (encode({**GOOD, "timestamp_ms": 5}), "timestamp_out_of_range"),
    ],
    ids=[
        "tombstone",
        "truncated-json",
        "not-utf8",
        "not-an-object",
        "missing-field",
        "unknown-field",
        "wrong-type",
        "nan",
        "negative",
        "bad-topic",
        "seconds-not-ms",
    ],
)
def test_a_bad_record_becomes_a_reject_row_with_its_bytes(value: bytes | None, reason: str) -> None:
    (row,), summary = parse([value])
    assert row["kind"] == RowKind.REJECT
    assert (row["reason"], row["raw"], row["kafka_offset"]) == (reason, value or b"", 100)
    assert row["detail"] and row["payload"] is None
    assert summary.rejected == Counter({reason: 1}) and summary.events == 0


def test_an_envelope_gives_a_row_per_event_and_names_the_bad_one() -> None:
    bad = {**GOOD, "msgRateOut": -1}
    value = json.dumps({"events": [GOOD, bad, event("t/ns/b", BASE_MS)]}).encode()
    rows, summary = parse([value])
    # Packs first (one per bucket and pane), then the rejects of the same flush.
    kinds = [r["kind"] for r in rows]
    assert kinds[-1] == RowKind.REJECT and set(kinds[:-1]) == {RowKind.PACK}
    events = events_of(pa.Table.from_pylist(rows[:-1], schema=PARSED_ARROW_SCHEMA))
    assert sorted(e["topic"] for e in events) == ["persistent://t/ns/a", "persistent://t/ns/b"]
    assert rows[-1]["detail"].startswith("event 1:") and rows[-1]["raw"] == value
    assert (summary.messages, summary.events, summary.consumed) == (1, 2, 3)


def test_a_huge_reject_keeps_a_bounded_prefix_of_its_bytes() -> None:
    value = b"[" + b"1," * (MAX_DEAD_LETTER_RAW_BYTES) + b"1]"
    (row,), _ = parse([value])
    assert row["reason"] == "not_an_object"
    assert row["raw"] == value[:MAX_DEAD_LETTER_RAW_BYTES]
    assert f"truncated to {MAX_DEAD_LETTER_RAW_BYTES} of {len(value)}" in row["detail"]


def test_the_summary_row_round_trips() -> None:
    summary = ReadSummary(1, 5, 9, high_watermark=12, messages=4, events=3)
    summary.rejected["bad_json"] += 1
    summary.pane_events[BASE_MS - BASE_MS % SLIDE_MS] += 3
    summary.newest_event_ms = BASE_MS + 5
    parser = RecordParser(num_buckets=4, slide_ms=SLIDE_MS, summary=summary)
    (row,) = parser.summary_batch().to_pylist()
    assert (row["kind"], row["kafka_partition"], row["kafka_offset"]) == (RowKind.SUMMARY, 1, 9)
    assert ReadSummary.from_json(row["summary"]) == summary


def test_parse_records_summarises_each_partition() -> None:
    batches = parse_records(
        [encode(GOOD), b"x", encode(GOOD)], [0, 1, 0], [7, 3, 8], num_buckets=8, slide_ms=SLIDE_MS
    )
    table = pa.Table.from_batches(batches)
    summaries = [
        ReadSummary.from_json(r["summary"])
        for r in table.to_pylist()
        if r["kind"] == RowKind.SUMMARY
    ]
    got = {(s.partition, s.start_offset, s.next_offset, s.events, s.consumed) for s in summaries}
    assert got == {(0, 7, 9, 2, 2), (1, 3, 4, 0, 1)}


def test_arrow_and_spark_schemas_agree() -> None:
    assert PARSED_ARROW_SCHEMA.names == PARSED_SPARK_SCHEMA.fieldNames()


def test_an_event_ahead_of_the_reader_keeps_its_pane_but_cannot_move_the_watermark() -> None:
    # Within the skew, an event 5 min ahead is accepted; the watermarked column (what Spark
    # advances the watermark by) is capped at the reader's clock, its pane is its own.
    summary = ReadSummary(partition=3, start_offset=0, next_offset=2)
    parser = RecordParser(
        num_buckets=1, slide_ms=SLIDE_MS, summary=summary, now_ms=BASE_MS,
        max_future_skew_ms=600_000,
    )  # fmt: skip
    ahead_ms = BASE_MS + 300_000
    parser.add(encode(event("t/ns/a", BASE_MS)), 3, 0)
    parser.add(encode(event("t/ns/b", ahead_ms)), 3, 1)
    rows = parser.flush().to_pylist()
    assert {r["pane_start"] for r in rows} == {
        BASE_MS - BASE_MS % SLIDE_MS,
        ahead_ms - ahead_ms % SLIDE_MS,
    }
    assert max(r["event_time"].timestamp() * 1000 for r in rows) == BASE_MS
    assert summary.pane_events == Counter(
        {BASE_MS - BASE_MS % SLIDE_MS: 1, ahead_ms - ahead_ms % SLIDE_MS: 1}
    )
    assert summary.newest_event_ms == ahead_ms
