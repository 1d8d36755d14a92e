"""The collector's round marker on the wire (`balancer.core.round_marker`) and in the read
task: a `MARK` row carrying its until_ms, never an event; a bad one is rejected, never fatal."""

from __future__ import annotations

import pytest

from balancer.core.events import Rejection
from balancer.core.round_marker import encode_round_marker, is_round_marker, parse_round_marker
from streaming.read.parse import RecordParser, parse_records
from streaming.read.summary import ReadSummary
from streaming.shared.schema import PARSED_ARROW_SCHEMA, RowKind
from tests.stream_events import BASE_MS, encode, event

SLIDE_MS = 60_000


def test_a_marker_round_trips() -> None:
    raw = encode_round_marker(BASE_MS + 60_000)
    assert is_round_marker(raw)
    assert parse_round_marker(raw) == BASE_MS + 60_000
    assert not is_round_marker(encode(event("t/ns/a", BASE_MS)))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"round_complete":', "bad_json"),
        (b'{"round_complete":{"until_ms":"1"}}', "wrong_type"),
        (b'{"round_complete":{"until_ms":true}}', "wrong_type"),
        (b'{"round_complete":{"until_ms":1,"x":2}}', "wrong_type"),
        (b'{"round_complete":{"until_ms":1},"x":2}', "wrong_type"),
        (b'{"round_complete":{"until_ms":5}}', "timestamp_out_of_range"),
        (encode_round_marker(BASE_MS + 700_000), "timestamp_in_future"),
    ],
)
def test_a_bad_marker_is_rejected_with_a_reason(raw: bytes, reason: str) -> None:
    result = parse_round_marker(raw, now_ms=BASE_MS, max_future_skew_ms=600_000)
    assert isinstance(result, Rejection)
    assert result.reason == reason


def _parser(summary: ReadSummary) -> RecordParser:
    return RecordParser(
        num_buckets=4, slide_ms=SLIDE_MS, summary=summary, now_ms=BASE_MS,
        max_future_skew_ms=600_000,
    )  # fmt: skip


def test_a_marker_becomes_a_mark_row_ahead_of_the_reader_and_no_event() -> None:
    summary = ReadSummary(partition=2, start_offset=10, next_offset=13)
    parser = _parser(summary)
    until_ms = BASE_MS + 55_000  # the next round: ahead of the reader's clock by design
    parser.add(encode(event("t/ns/a", BASE_MS)), 2, 10)
    parser.add(encode_round_marker(until_ms), 2, 11)
    parser.add(b'{"round_complete":{"until_ms":"x"}}', 2, 12)
    batch = parser.flush()
    assert batch.schema == PARSED_ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [r["kind"] for r in rows] == [RowKind.PACK, RowKind.REJECT, RowKind.MARK]
    mark = rows[2]
    # Not capped at the reader's clock as a pack's event time is.
    assert mark["event_time"].timestamp() * 1000 == until_ms
    assert (mark["kafka_partition"], mark["kafka_offset"]) == (2, 11)
    assert mark["payload"] is None and mark["bucket"] is None
    assert (summary.events, summary.marks, summary.messages) == (1, 1, 3)
    assert summary.rejected == {"wrong_type": 1}
    assert summary.newest_event_ms == BASE_MS  # a marker is no event: lag is unchanged
    assert ReadSummary.from_json(summary.to_json()) == summary


def test_the_native_path_reads_markers_too() -> None:
    batches = parse_records(
        [encode_round_marker(BASE_MS)], [0], [4], num_buckets=4, slide_ms=SLIDE_MS
    )
    kinds = [r["kind"] for b in batches for r in b.to_pylist()]
    assert kinds == [RowKind.MARK, RowKind.SUMMARY]


def test_a_marker_in_a_run_of_single_events_is_kept() -> None:
    summary = ReadSummary(partition=0, start_offset=0, next_offset=3)
    parser = _parser(summary)
    values = [
        encode(event("t/ns/a", BASE_MS)),
        encode_round_marker(BASE_MS + 1),
        encode(event("t/ns/b", BASE_MS)),
    ]
    assert parser.add_run(values, 0, [0, 1, 2], limit=100) == 3
    rows = parser.flush().to_pylist()
    assert [r["kind"] for r in rows].count(RowKind.MARK) == 1
    assert (summary.events, summary.marks) == (2, 1)
