"""Arrow envelopes (balancer.core.arrow_envelope): the codec, and parse_message reading them.

An Arrow envelope's rows get exactly the verdicts (events or rejections, with their details)
that the same events get in a JSON envelope; a message that is not an envelope of version 1
is refused whole as `bad_arrow`, never with an exception.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.arrow_envelope import (
    ENVELOPE_SCHEMA,
    METADATA_KEY,
    decode_envelope,
    encode_envelope,
    is_arrow_envelope,
)
from balancer.core.events import (
    MAX_MESSAGE_BYTES,
    Rejection,
    RejectReason,
    TopicStatsEvent,
    parse_message,
    validate_event,
)

NOW_MS = 1_700_000_000_000
GOOD: dict[str, Any] = {
    "cluster": "c1", "topic": "persistent://t/ns/a", "timestamp_ms": NOW_MS - 5_000,
    "msgRateIn": 1.5, "msgRateOut": 2.0, "msgThroughputIn": 100.25, "msgThroughputOut": 0.0,
    "storageSize": 1000, "backlogSize": 10, "offloadedStorageSize": 0, "producerCount": 1,
    "consumerCount": 2, "broker": "b1:8080",
}  # fmt: skip
RULES: dict[str, Any] = {"now_ms": NOW_MS, "clusters": frozenset({"c1", "c2"})}


def arrow(rows: list[dict[str, Any]], schema: pa.Schema = ENVELOPE_SCHEMA) -> bytes:
    """An envelope of `rows` as they are (bad values included), through pyarrow's writer."""
    return stream(schema, [pa.RecordBatch.from_pylist(rows, schema=schema)])


def stream(schema: pa.Schema, batches: list[pa.RecordBatch], **options: Any) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(**options)) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def json_envelope(rows: list[dict[str, Any]]) -> bytes:
    return json.dumps({"events": rows}).encode()


def row(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def event(**changes: Any) -> TopicStatsEvent:
    result = validate_event(row(**changes))
    assert isinstance(result, TopicStatsEvent)
    return result


def test_an_encoded_envelope_reads_back_as_its_events() -> None:
    events = [event(), event(topic="persistent://t/ns/b", broker=None, cluster="c2")]
    raw = encode_envelope(events)
    assert is_arrow_envelope(raw)
    batch = decode_envelope(raw)
    assert isinstance(batch, pa.RecordBatch)
    assert batch.schema.equals(ENVELOPE_SCHEMA, check_metadata=True)
    assert parse_message(raw, **RULES) == events


def test_json_is_never_taken_for_an_arrow_envelope() -> None:
    assert not is_arrow_envelope(json_envelope([GOOD]))
    assert not is_arrow_envelope(b"")
    assert not is_arrow_envelope(b"\xff\xff\xff")


def test_an_empty_envelope_yields_nothing_as_a_json_one_does() -> None:
    assert parse_message(encode_envelope([])) == [] == parse_message(json_envelope([]))


# Bad rows: each gets the verdict the same row gets in a JSON envelope.
BAD_ROWS = {
    "negative-rate": row(msgRateOut=-1.0),
    "negative-count": row(consumerCount=-3),
    "negative-zero-rate-is-fine": row(msgRateIn=-0.0),
    "rate-too-high": row(msgThroughputIn=2e18),
    "timestamp-in-seconds": row(timestamp_ms=1_700_000_000),
    "timestamp-too-late": row(timestamp_ms=4_102_444_800_000),
    "timestamp-in-future": row(timestamp_ms=NOW_MS + 10 * 60_000 + 1),
    "timestamp-at-skew": row(timestamp_ms=NOW_MS + 10 * 60_000),
    "empty-cluster": row(cluster=""),
    "empty-topic": row(topic=""),
    "unknown-cluster": row(cluster="c9"),
    "short-topic-name": row(topic="orders"),
    "v1-topic-name": row(topic="persistent://t/cl/ns/a"),
    "bad-domain": row(topic="http://t/ns/a"),
    "trailing-space": row(topic="persistent://t/ns/a "),
    "unicode-topic": row(topic="persistent://t/ns/ä€😀"),
    "null-cluster": row(cluster=None),
    "null-topic": row(topic=None),
    "null-timestamp": row(timestamp_ms=None),
    "null-rate": row(msgRateIn=None),
    "null-count": row(storageSize=None),
    "null-broker": row(broker=None),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_each_row_gets_the_verdict_of_the_same_event_in_json(case: str) -> None:
    rows = [GOOD, BAD_ROWS[case], row(topic="persistent://t/ns/z")]
    assert parse_message(arrow(rows), **RULES) == parse_message(json_envelope(rows), **RULES)


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (math.nan, "msgRateIn is nan"),
        (math.inf, "msgRateIn is inf"),
        (-math.inf, "msgRateIn is -inf"),
    ],
)
def test_a_non_finite_rate_rejects_its_row_only(value: float, detail: str) -> None:
    # JSON cannot carry NaN (its message is bad_json whole); Arrow can, and a row is an event.
    results = parse_message(arrow([GOOD, row(msgRateIn=value)]), **RULES)
    assert results == [event(), Rejection(RejectReason.NOT_FINITE, detail)]


OPTIONAL = st.one_of(st.none(), st.just(0), st.just(-1))
ROWS = st.fixed_dictionaries(
    {
        "cluster": st.one_of(
            st.sampled_from(["c1", "c2", "c3", ""]), st.none(), st.text(max_size=3)
        ),
        "topic": st.one_of(
            st.sampled_from(["persistent://t/ns/a", "non-persistent://t/ns/b", "t/ns/c", "d", ""]),
            st.text(max_size=12).map(lambda s: f"persistent://t/ns/{s}"),
            st.none(),
        ),
        "timestamp_ms": st.one_of(
            st.integers(NOW_MS - 3_600_000, NOW_MS + 3_600_000),
            st.integers(-(2**63), 2**63 - 1),
            st.none(),
        ),
        **{
            name: st.one_of(
                st.floats(allow_nan=False, allow_infinity=False), st.floats(0.0, 1e6), st.none()
            )
            for name in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
        },
        **{
            name: st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**6), st.none())
            for name in (
                "storageSize",
                "backlogSize",
                "offloadedStorageSize",
                "producerCount",
                "consumerCount",
            )
        },
        "broker": st.one_of(st.none(), st.text(max_size=8)),
    }
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ROWS, max_size=8), st.booleans())
def test_generated_rows_get_the_verdicts_of_a_json_envelope(
    rows: list[dict[str, Any]], with_rules: bool
) -> None:
    rules = RULES if with_rules else {}
    assert parse_message(arrow(rows), **rules) == parse_message(json_envelope(rows), **rules)


def bad_arrow(raw: bytes) -> str:
    results = parse_message(raw)
    assert len(results) == 1 and isinstance(results[0], Rejection), results
    assert results[0].reason == RejectReason.BAD_ARROW, results[0]
    return results[0].detail


def test_another_schema_is_refused_whole() -> None:
    fields = list(ENVELOPE_SCHEMA)
    metadata = ENVELOPE_SCHEMA.metadata
    reordered = pa.schema([fields[1], fields[0], *fields[2:]], metadata=metadata)
    assert "not the Arrow envelope schema" in bad_arrow(arrow([GOOD], reordered))
    int_rates = pa.schema(
        [pa.field(f.name, pa.int64()) if f.name == "msgRateIn" else f for f in fields],
        metadata=metadata,
    )
    assert "msgRateIn: int64" in bad_arrow(arrow([row(msgRateIn=1)], int_rates))
    extra = pa.schema([*fields, pa.field("zone", pa.string())], metadata=metadata)
    assert "zone" in bad_arrow(arrow([row(zone="x")], extra))
    dictionary = pa.schema(
        [pa.field("cluster", pa.dictionary(pa.int32(), pa.string())), *fields[1:]],
        metadata=metadata,
    )
    assert "not the Arrow envelope schema" in bad_arrow(arrow([GOOD], dictionary))


def test_another_version_or_none_is_refused_whole() -> None:
    v2 = ENVELOPE_SCHEMA.with_metadata({METADATA_KEY: b"2"})
    assert "version b'2'" in bad_arrow(arrow([GOOD], v2))
    assert "version none" in bad_arrow(arrow([GOOD], ENVELOPE_SCHEMA.remove_metadata()))


def test_other_than_one_batch_is_refused_whole() -> None:
    batch = pa.RecordBatch.from_pylist([GOOD], schema=ENVELOPE_SCHEMA)
    assert "more" in bad_arrow(stream(ENVELOPE_SCHEMA, [batch, batch]))
    assert "none" in bad_arrow(stream(ENVELOPE_SCHEMA, []))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_compressed_batch_is_refused_before_it_is_inflated(codec: str) -> None:
    batch = pa.RecordBatch.from_pylist([GOOD] * 10, schema=ENVELOPE_SCHEMA)
    assert "compressed" in bad_arrow(stream(ENVELOPE_SCHEMA, [batch], compression=codec))


def test_garbage_is_refused_whole_not_raised() -> None:
    good = encode_envelope([event()])
    assert "follow" in bad_arrow(good + b"x")
    for raw in (
        b"\xff\xff\xff\xff",
        b"\xff\xff\xff\xffgarbage",
        b"\xff\xff\xff\xff\x00\x00\x00\x00",  # end of stream at once
        b"\xff" * 64,
        good[: len(good) // 2],
    ):
        bad_arrow(raw)
    assert "end-of-stream" in bad_arrow(good[:-8])  # the batch whole, the marker cut off


def test_a_message_over_the_cap_is_too_large() -> None:
    raw = b"\xff\xff\xff\xff" + bytes(MAX_MESSAGE_BYTES)
    assert parse_message(raw)[0].reason == RejectReason.TOO_LARGE  # type: ignore[union-attr]
    assert decode_envelope(raw).reason == RejectReason.TOO_LARGE  # type: ignore[union-attr]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_damaged_envelope_never_raises(data: st.DataObject) -> None:
    raw = bytearray(encode_envelope([event(), event(topic="persistent://t/ns/b", broker=None)]))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(4, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(raw)))
    results = parse_message(bytes(raw[:cut]), **RULES)
    assert all(isinstance(r, TopicStatsEvent | Rejection) for r in results)
