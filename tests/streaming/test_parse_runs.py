"""Runs of records parsed at once (`decode_single_events`, `RecordParser.add_run`) against
the same records one by one (`decode_fast`, `RecordParser.add`): the same events and rows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.read.fastparse import decode_fast, decode_single_events
from streaming.read.parse import RecordParser
from streaming.read.summary import ReadSummary
from streaming.read.topic_columns import CanonicalNames
from tests.streaming.test_fastparse import CASES, GOOD, MESSAGES, NO_BROKER, enc, values

# Mostly well-formed single events (so that runs take the fast path), some of any kind.
SINGLE = st.builds(
    lambda i, broker, topic: enc(
        {**(GOOD if broker else NO_BROKER), "timestamp_ms": GOOD["timestamp_ms"] + i,
         "topic": f"persistent://t/ns-{topic}/a{i % 7}"}
    ),
    st.integers(0, 600_000), st.booleans(), st.integers(0, 3),
)  # fmt: skip
RUNS = st.lists(SINGLE | SINGLE | SINGLE | MESSAGES | st.none(), max_size=40)
TABLE = [raw for _, raw, _ in CASES]


@settings(max_examples=300, deadline=None)
@given(RUNS)
def test_a_run_decodes_as_its_messages_one_by_one_or_not_at_all(run: list[bytes | None]) -> None:
    got = decode_single_events(run)
    one_by_one = [None if raw is None else decode_fast(raw) for raw in run]
    if got is None:
        return
    assert all(events is not None and len(events) == 1 for events in one_by_one)
    want = [events[0] for events in one_by_one if events is not None]
    assert [(e.topic, values(e)) for e in got] == [(e.topic, values(e)) for e in want]


def test_a_run_of_good_single_events_takes_the_fast_path() -> None:
    run = [enc({**GOOD, "timestamp_ms": GOOD["timestamp_ms"] + i}) for i in range(50)]
    run.append(enc(NO_BROKER))
    events = decode_single_events(run)
    assert events is not None and len(events) == 51
    assert decode_single_events([]) == []
    # A run that starts with an envelope goes record by record, without copying the run.
    assert decode_single_events([enc({"events": [GOOD, GOOD]}), *run]) is None


def test_each_table_message_among_good_ones_decodes_as_it_does_alone() -> None:
    good = enc(GOOD)
    for raw in TABLE:
        alone = decode_fast(raw)
        got = decode_single_events([good, raw, good])
        if got is not None:  # only when the message is a single event the fast path takes
            assert alone is not None and len(alone) == 1
            assert values(got[1]) == values(alone[0])


def _parse(run: list[bytes | None], limit: int, *, by_runs: bool, **rules: Any) -> list[Any]:
    """Every flushed batch's rows and the summary, parsing `run` as one read task does."""
    summary = ReadSummary(partition=3, start_offset=10, next_offset=10 + len(run))
    parser = RecordParser(
        num_buckets=4, slide_ms=60_000, summary=summary, names=CanonicalNames(), **rules
    )
    batches: list[pa.RecordBatch] = []
    offsets = list(range(10, 10 + len(run)))
    if by_runs:
        rest, at = list(run), list(offsets)
        while rest:
            taken = parser.add_run(rest, 3, at, limit=limit)
            if len(parser) >= limit:
                batches.append(parser.flush())
            rest, at = rest[taken:], at[taken:]
    else:
        for raw, offset in zip(run, offsets, strict=True):
            parser.add(raw, 3, offset)
            if len(parser) >= limit:
                batches.append(parser.flush())
    if len(parser):
        batches.append(parser.flush())
    return [b.to_pylist() for b in batches] + [summary.to_json()]


@settings(max_examples=200, deadline=None)
@given(RUNS, st.integers(1, 50))
def test_add_run_gives_the_rows_of_add_record_by_record(
    run: list[bytes | None], limit: int
) -> None:
    assert _parse(run, limit, by_runs=True) == _parse(run, limit, by_runs=False)


@settings(max_examples=100, deadline=None)
@given(RUNS, st.integers(1, 50))
def test_add_run_applies_the_readers_rules_as_add_does(run: list[bytes | None], limit: int) -> None:
    rules: dict[str, Any] = {
        "now_ms": GOOD["timestamp_ms"] + 300_000,  # some events of a run are ahead of it
        "max_future_skew_ms": 1,
        "clusters": frozenset({"c1", "c2"}),
    }
    by_runs = _parse(run, limit, by_runs=True, **rules)
    assert by_runs == _parse(run, limit, by_runs=False, **rules)
