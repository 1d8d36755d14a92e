"""A read task reads Arrow envelopes (balancer.core.arrow_envelope) as it reads JSON ones.

The fast path keeps an envelope's rows as Arrow columns and checks them, vectorized, at the
flush; a message with any row those checks refuse is judged by `parse_message` (exact
reasons). Whatever the path, the rows are those `parse_message` gives (the reference of
tests/streaming/test_fastparse.py), and an Arrow envelope gives exactly the rows the same
events give as a JSON envelope: the packs, the rejects (reason, detail, offset) and the
flushes of a read task's limit, mixed with JSON messages or not.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.arrow_envelope import ENVELOPE_SCHEMA, METADATA_KEY
from streaming.read import parse
from streaming.read.parse import RecordParser
from streaming.read.summary import ReadSummary
from streaming.read.topic_columns import CanonicalNames, DedupeChoice
from tests.streaming.test_fastparse import GOOD, MESSAGES, never_dedupe, reference, run_parser

NOW_MS = GOOD["timestamp_ms"]
RULES: dict[str, Any] = {
    "now_ms": NOW_MS,
    "max_future_skew_ms": 600_000,
    "clusters": frozenset({"c1", "c2"}),
}


def arrow(
    rows: list[dict[str, Any]], schema: pa.Schema = ENVELOPE_SCHEMA, copies: int = 1
) -> bytes:
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for _ in range(copies):
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def json_envelope(rows: list[dict[str, Any]]) -> bytes:
    return json.dumps({"events": rows}).encode()


def row(i: int = 0, **changes: Any) -> dict[str, Any]:
    return {
        **GOOD,
        "topic": f"persistent://t/ns-{i % 3}/a{i}",
        "timestamp_ms": NOW_MS - 70_000 + 997 * i,
        **changes,
    }


# Bad rows: each is refused by the vectorized checks, and parse_message says why.
BAD = {
    "nan-rate": {"msgRateIn": math.nan},
    "inf-rate": {"msgThroughputOut": math.inf},
    "negative-rate": {"msgRateOut": -1.0},
    "negative-count": {"consumerCount": -1},
    "rate-too-high": {"msgRateIn": 1e19},
    "rate-at-the-cap": {"msgRateIn": 1e18},  # validate_event accepts it: the slow path keeps it
    "negative-zero": {"msgRateIn": -0.0},  # fine on both paths, and stays -0.0
    "timestamp-in-seconds": {"timestamp_ms": NOW_MS // 1000},
    "timestamp-negative": {"timestamp_ms": -1},
    "timestamp-past-2100": {"timestamp_ms": 4_102_444_800_000},
    "future-skew": {"timestamp_ms": NOW_MS + 600_001},
    "at-the-skew": {"timestamp_ms": NOW_MS + 600_000},
    "empty-cluster": {"cluster": ""},
    "unknown-cluster": {"cluster": "c9"},
    "empty-topic": {"topic": ""},
    "short-name": {"topic": "t/ns/short"},  # valid, not canonical: normalised
    "bare-name": {"topic": "bare"},  # valid: persistent://public/default/bare
    "v1-name": {"topic": "persistent://t/c/ns/a"},
    "bad-domain": {"topic": "x://t/ns/a"},
    "bad-tenant": {"topic": "persistent://t t/ns/a"},
    "empty-namespace": {"topic": "persistent://t//a"},
    "empty-local": {"topic": "persistent://t/ns/"},
    "trailing-space": {"topic": "persistent://t/ns/a "},
    "trailing-newline": {"topic": "persistent://t/ns/a\n"},
    "inner-space": {"topic": "persistent://t/ns/a b"},
    "unicode-local": {"topic": "persistent://t/ns/zäh€😀"},
    "unicode-trailing-space": {"topic": "persistent://t/ns/a\u2003"},
    "unicode-tenant": {"topic": "persistent://tä/ns/a"},
    "non-persistent": {"topic": "non-persistent://t/ns/np"},
    "null-cluster": {"cluster": None},
    "null-topic": {"topic": None},
    "null-timestamp": {"timestamp_ms": None},
    "null-rate": {"msgRateIn": None},
    "null-count": {"backlogSize": None},
    "null-broker": {"broker": None},
}


def stripped(rows: list[Any]) -> list[Any]:
    """Rows without a reject's raw bytes (an Arrow message's are not its JSON twin's)."""
    return [r[:3] if isinstance(r[0], str) else r for r in rows]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_row_gets_the_rows_of_the_same_events_in_json(case: str) -> None:
    rows = [row(0), row(1, **BAD[case]), row(2)]
    messages = [arrow([row(5)]), arrow(rows), json_envelope([row(6)]), arrow([row(7)])]
    got = run_parser(messages, 4, CanonicalNames(), **RULES)
    assert got == reference(messages, 4, **RULES)
    if not any(isinstance(v, float) and not math.isfinite(v) for v in BAD[case].values()):
        twins = [json_envelope([row(5)]), json_envelope(rows), json_envelope([row(6)])]
        twins.append(json_envelope([row(7)]))
        assert stripped(got) == stripped(run_parser(twins, 4, CanonicalNames(), **RULES))


REFUSED = {
    "two-batches": arrow([row(0)], copies=2),
    "no-batch": arrow([row(0)], copies=0),
    "other-version": arrow([row(0)], ENVELOPE_SCHEMA.with_metadata({METADATA_KEY: b"2"})),
    "wrong-schema": arrow(
        [{**row(0), "msgRateIn": 1}],
        pa.schema(
            [pa.field(f.name, pa.int64()) if f.name == "msgRateIn" else f for f in ENVELOPE_SCHEMA],
            metadata=ENVELOPE_SCHEMA.metadata,
        ),
    ),
    "garbage-after-ff": b"\xff\xff\xff\xff\x10\x00\x00\x00garbage",
    "cut-short": arrow([row(0)])[:100],
    "bytes-after-the-end": arrow([row(0)]) + b"\x00",
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_message_that_is_no_envelope_is_one_reject_among_good_ones(case: str) -> None:
    messages = [arrow([row(0), row(1)]), REFUSED[case], arrow([row(2)])]
    got = run_parser(messages, 4, CanonicalNames(), **RULES)
    assert got == reference(messages, 4, **RULES)
    assert [r[0] for r in got if isinstance(r[0], str)] == ["bad_arrow"]


def test_well_formed_envelopes_never_take_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the slow path judged a well-formed envelope")

    monkeypatch.setattr(parse, "parse_message", slow)
    messages = [arrow([row(i), row(i + 1, broker=None)]) for i in range(0, 20, 2)]
    rows = run_parser(messages, 4, CanonicalNames(), **RULES)
    assert len(rows) == 20 and not any(isinstance(r[0], str) for r in rows)


# Mostly good rows; now and then a bad field of the table above.
ROWS = st.builds(
    lambda i, bad: row(i, **({} if bad is None else BAD[bad])),
    st.integers(0, 200),
    st.none() | st.none() | st.none() | st.sampled_from(sorted(BAD)),
)
ENVELOPES = st.lists(ROWS, max_size=6)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(ENVELOPES.map(arrow) | ENVELOPES.map(json_envelope) | MESSAGES, max_size=6),
    st.integers(1, 16),
    st.booleans(),
    st.booleans(),
)
def test_mixed_messages_give_the_reference_rows(
    messages: list[bytes], n: int, dedupe: bool, with_rules: bool
) -> None:
    choice = DedupeChoice() if dedupe else never_dedupe()
    rules = RULES if with_rules else {}
    assert run_parser(messages, n, CanonicalNames(), choice, **rules) == reference(
        messages, n, **rules
    )


def _flushes(messages: list[bytes], limit: int) -> list[Any]:
    """Each flush's rows (a reject without its raw bytes) and the summary, as a task reads."""
    summary = ReadSummary(partition=3, start_offset=0, next_offset=len(messages))
    parser = RecordParser(
        num_buckets=4, slide_ms=60_000, summary=summary, names=CanonicalNames(), **RULES
    )
    flushed: list[Any] = []
    rest, at = list(messages), list(range(len(messages)))
    while rest:
        taken = parser.add_run(rest, 3, at, limit=limit)
        if len(parser) >= limit:
            flushed.append(parser.flush())
        rest, at = rest[taken:], at[taken:]
    if len(parser):
        flushed.append(parser.flush())
    # The summary compared as counts (an Arrow envelope's rejects are counted at the flush).
    rows = [[{**r, "raw": None} for r in b.to_pylist()] for b in flushed]
    return [*rows, ReadSummary.from_json(summary.to_json())]


FINITE_BAD = sorted(k for k in BAD if k not in ("nan-rate", "inf-rate"))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.builds(
                    lambda i, bad: row(i, **({} if bad is None else BAD[bad])),
                    st.integers(0, 200),
                    st.none() | st.none() | st.sampled_from(FINITE_BAD),
                ),
                max_size=5,
            ),
            st.booleans(),
        ),
        max_size=8,
    ),
    st.integers(1, 12),
)
def test_a_task_flushes_arrow_envelopes_as_their_json_twins(
    envelopes: list[tuple[list[dict[str, Any]], bool]], limit: int
) -> None:
    """The same flushes (packs, rejects, summary) whichever messages came as Arrow."""
    mixed = [arrow(rows) if as_arrow else json_envelope(rows) for rows, as_arrow in envelopes]
    twins = [json_envelope(rows) for rows, _ in envelopes]
    assert _flushes(mixed, limit) == _flushes(twins, limit)
