"""The read task's cheaper counts keep its rows: the quote count that proves no key repeated
(`streaming.read.fastparse.count_quotes`, numpy for large messages) and the topic columns
read off the names' bytes (tests/streaming/test_topic_columns.py) give the rows of the
reference, `parse_message` message by message, whatever the envelopes, good or bad."""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.read import fastparse
from streaming.read.fastparse import NUMPY_COUNT_MIN_BYTES, count_quotes
from streaming.read.topic_columns import CanonicalNames, DedupeChoice
from tests.streaming.test_fastparse import (
    MESSAGES,
    Obj,
    dump,
    events,
    never_dedupe,
    reference,
    run_parser,
)

SIZES = st.integers(0, 3 * NUMPY_COUNT_MIN_BYTES)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), SIZES, st.sampled_from([b"", b'"', b'\\"', b'""']))
def test_count_quotes_is_bytes_count_at_every_size(tail: bytes, size: int, fill: bytes) -> None:
    raw = (fill * size)[:size] + tail
    assert count_quotes(raw) == raw.count(b'"')


@settings(max_examples=60, deadline=None)
@given(st.lists(MESSAGES, max_size=6), st.integers(1, 64), st.booleans())
def test_the_parser_keeps_the_reference_rows_with_numpy_counting_every_message(
    messages: list[bytes], n: int, dedupe: bool
) -> None:
    choice = DedupeChoice() if dedupe else never_dedupe()
    with patch.object(fastparse, "NUMPY_COUNT_MIN_BYTES", 0):
        assert run_parser(messages, n, CanonicalNames(), choice) == reference(messages, n)


# Envelopes of tens of events (past NUMPY_COUNT_MIN_BYTES), a few of them bad: a repeated
# key, an unknown field, a wild value; the rest must be kept, the bad ones rejected alone.
BIG_ENVELOPES = st.builds(
    lambda evs, ascii_only: dump(Obj([("events", evs)]), ascii_only).encode(
        "utf-8", "surrogatepass"
    ),
    st.lists(events(), min_size=20, max_size=40),
    st.booleans(),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(BIG_ENVELOPES, min_size=1, max_size=3), st.integers(1, 16))
def test_big_envelopes_give_the_reference_rows(messages: list[bytes], n: int) -> None:
    assert run_parser(messages, n, CanonicalNames()) == reference(messages, n)
