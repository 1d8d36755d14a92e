"""Envelopes under a byte cap, in Arrow and JSON: every event carried once, in order; no
message over the cap."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from balancer.core.arrow_envelope import encode_envelope, is_arrow_envelope
from balancer.core.envelopes import (
    DEFAULT_ENVELOPE_FORMAT,
    DEFAULT_ENVELOPE_MAX_BYTES,
    DEFAULT_ENVELOPE_MAX_EVENTS,
    ENVELOPE_FORMATS,
    EnvelopeFormat,
    Message,
    Oversized,
    arrow_envelopes,
    arrow_size_estimate,
    pack,
    record_bytes,
)
from balancer.core.events import Rejection, RejectReason, TopicStatsEvent, parse_message
from streaming.read.fastparse import decode_fast

FORMATS: list[EnvelopeFormat] = ["arrow", "json"]


def event(topic: str, i: int = 0, broker: str | None = "10.0.0.1:8080") -> TopicStatsEvent:
    return TopicStatsEvent(
        cluster="east",
        topic=topic,
        timestamp_ms=1_767_225_600_000,
        msgRateIn=float(i),
        msgRateOut=2.5,
        msgThroughputIn=1024.0 * i,
        msgThroughputOut=0.0,
        storageSize=10**9 + i,
        backlogSize=i,
        offloadedStorageSize=0,
        producerCount=1,
        consumerCount=i % 3,
        broker=broker,
    )


def events_of(namespace: str, n: int, name_len: int = 8) -> list[TopicStatsEvent]:
    return [event(f"persistent://{namespace}/{'t' * name_len}-{i}", i) for i in range(n)]


def messages(items: list[Message | Oversized]) -> list[Message]:
    return [m for m in items if isinstance(m, Message)]


def carried(items: list[Message | Oversized]) -> list[TopicStatsEvent]:
    out = []
    for m in messages(items):
        for parsed in parse_message(m.value):
            assert isinstance(parsed, TopicStatsEvent), parsed
            out.append(parsed)
    return out


def test_default_envelopes_are_arrow_and_hold_500_events_of_one_namespace_keyed_by_it() -> None:
    assert DEFAULT_ENVELOPE_FORMAT == "arrow" and set(ENVELOPE_FORMATS) == set(FORMATS)
    events = events_of("acme/orders", 1200)
    items = list(
        pack(events, max_events=DEFAULT_ENVELOPE_MAX_EVENTS, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES)
    )
    assert [m.events for m in messages(items)] == [500, 500, 200]
    assert all(m.key == b"acme/orders" for m in messages(items))
    assert all(is_arrow_envelope(m.value) for m in messages(items))
    assert carried(items) == events
    first = messages(items)[0]
    assert first.value == encode_envelope(events[:500])  # one encode of the 500 events
    assert first.size_bytes < DEFAULT_ENVELOPE_MAX_BYTES // 8  # the cap rarely cuts


def test_json_envelopes_are_what_json_dumps_writes_and_take_the_fast_path() -> None:
    events = events_of("acme/orders", 1200)
    items = list(
        pack(
            events,
            max_events=DEFAULT_ENVELOPE_MAX_EVENTS,
            max_bytes=DEFAULT_ENVELOPE_MAX_BYTES,
            envelope_format="json",
        )
    )
    assert [m.events for m in messages(items)] == [500, 500, 200]
    assert carried(items) == events
    first = messages(items)[0]
    body = {"events": [e.to_dict() for e in events[:500]]}
    assert first.value == json.dumps(body, separators=(",", ":")).encode()
    assert decode_fast(first.value) is not None
    assert first.size_bytes < DEFAULT_ENVELOPE_MAX_BYTES // 4  # ~150 KB: the cap rarely cuts


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="envelope_format"):
        list(pack([], max_events=500, max_bytes=4096, envelope_format="avro"))  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_namespace_has_envelopes_of_its_own(fmt: EnvelopeFormat) -> None:
    events = events_of("a/x", 3) + events_of("b/y", 2) + events_of("a/x", 1, name_len=20)
    items = list(
        pack(events, max_events=500, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES, envelope_format=fmt)
    )
    assert [(m.key, m.events) for m in messages(items)] == [(b"a/x", 4), (b"b/y", 2)]
    assert carried(items) == events[:3] + events[5:] + events[3:5]


def test_the_byte_cap_cuts_json_envelopes_and_no_message_passes_it() -> None:
    events = events_of("acme/orders", 200)
    one = len(events[0].to_json())
    cap = 10 * one  # a handful of events per envelope
    items = list(pack(events, max_events=500, max_bytes=cap, envelope_format="json"))
    sent = messages(items)
    assert len(sent) > 20 and not [i for i in items if isinstance(i, Oversized)]
    assert carried(items) == events
    for m in sent:
        assert m.size_bytes <= cap
        # kafka-python's own bound on the record (what max_request_size is checked against)
        assert DefaultRecordBatchBuilder.estimate_size_in_bytes(m.key, m.value, []) <= cap
    # Cut only where the next event would not have fitted.
    for m, following in itertools.pairwise(sent):
        next_body = json.dumps(json.loads(following.value)["events"][0], separators=(",", ":"))
        assert m.size_bytes + 1 + len(next_body) > cap


def test_the_byte_cap_cuts_arrow_envelopes_and_no_message_passes_it() -> None:
    events = events_of("acme/orders", 300, name_len=40)
    cap = 8192  # ~40 events per envelope
    items = list(pack(events, max_events=500, max_bytes=cap, envelope_format="arrow"))
    sent = messages(items)
    assert len(sent) > 5 and not [i for i in items if isinstance(i, Oversized)]
    assert carried(items) == events
    for m in sent:
        assert m.size_bytes <= cap
        assert DefaultRecordBatchBuilder.estimate_size_in_bytes(m.key, m.value, []) <= cap
    # Cut where the next event would not have fitted, give or take the estimate's slack.
    position = 0
    for m in sent[:-1]:
        position += m.events
        grown = encode_envelope(events[position - m.events : position + 1])
        assert record_bytes(m.key, grown) > cap - ESTIMATE_SLACK_BYTES


# How far the Arrow size estimate may lie above the bytes (padding, the broker's validity
# byte per row counted for its bit): envelopes are at most this much short of full.
ESTIMATE_SLACK_BYTES = 256 + 500


@settings(max_examples=200, deadline=None)
@given(
    spec=st.lists(
        st.tuples(
            st.integers(1, 300),
            st.sampled_from(["east", "w", "clüster-ü"]),
            st.none() | st.text(min_size=0, max_size=40),
        ),
        min_size=1,
        max_size=300,
    )
)
def test_the_arrow_size_estimate_is_an_upper_bound_and_close(
    spec: list[tuple[int, str, str | None]],
) -> None:
    events = [
        TopicStatsEvent(
            cluster=cluster,
            topic=f"persistent://a/b/{'n' * length}",
            timestamp_ms=1_767_225_600_000 + i,
            msgRateIn=0.5 * i,
            msgRateOut=0.0,
            msgThroughputIn=1e9,
            msgThroughputOut=3.0,
            storageSize=i,
            backlogSize=2**62,
            offloadedStorageSize=0,
            producerCount=i % 2,
            consumerCount=1,
            broker=broker if broker is None else broker.encode("utf-8", "replace").decode(),
        )
        for i, (length, cluster, broker) in enumerate(spec)
    ]
    actual = len(encode_envelope(events))
    assert actual <= arrow_size_estimate(events) <= actual + ESTIMATE_SLACK_BYTES


def test_an_arrow_envelope_over_its_budget_is_split_in_halves_until_each_fits() -> None:
    # The safety net behind the estimate: whatever the chunk, no value over the budget.
    events = events_of("acme/orders", 100, name_len=30)
    budget = len(encode_envelope(events[:30]))
    items = list(arrow_envelopes(b"acme/orders", events, budget))
    sent = messages(items)
    assert [m.events for m in sent] == [25, 25, 25, 25]
    assert all(len(m.value) <= budget for m in sent)
    assert carried(items) == events
    tight = len(encode_envelope(events[:1])) - 1  # not even one event fits
    assert [o.event for o in items if isinstance(o, Oversized)] == []
    alone = list(arrow_envelopes(b"acme/orders", events[:3], tight))
    assert [o.event for o in alone if isinstance(o, Oversized)] == events[:3]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        # A lone surrogate is no UTF-8; a size of 2^64 no int64: Arrow refuses both.
        (event("persistent://acme/orders/bad-\ud800"), RejectReason.BAD_ENCODING),
        (replace(event("persistent://a/b/big"), storageSize=2**64), RejectReason.WRONG_TYPE),
    ],
)
def test_an_event_arrow_cannot_hold_goes_as_json_and_the_stream_rejects_it(
    bad: TopicStatsEvent, reason: RejectReason
) -> None:
    # As JSON the stream reads the message and dead-letters the event with its reason, as
    # it would have from the JSON format, instead of the collector failing its round.
    events = events_of(bad.namespace, 5)
    items = list(
        pack([*events[:2], bad, *events[2:]], max_events=500, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES)
    )
    sent = messages(items)
    (as_json,) = [m for m in sent if not is_arrow_envelope(m.value)]
    assert carried([m for m in sent if m is not as_json]) == events  # in Arrow, in order
    assert as_json.key == bad.topic.encode("utf-8", "surrogatepass")
    (rejection,) = parse_message(as_json.value)
    assert isinstance(rejection, Rejection) and rejection.reason is reason


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_event_per_message_is_json_keyed_by_topic(fmt: EnvelopeFormat) -> None:
    events = events_of("acme/orders", 3)
    for max_events in (0, 1):
        items = list(
            pack(
                events,
                max_events=max_events,
                max_bytes=DEFAULT_ENVELOPE_MAX_BYTES,
                envelope_format=fmt,
            )
        )
        assert [(m.key, m.value, m.events) for m in messages(items)] == [
            (e.topic.encode(), e.to_json().encode(), 1) for e in events
        ]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("max_events", [1, 500])
def test_an_event_too_large_on_its_own_is_not_sent(max_events: int, fmt: EnvelopeFormat) -> None:
    small = events_of("acme/orders", 2)
    huge = event("persistent://acme/orders/" + "x" * 5000)
    cap = 4096
    items = list(
        pack([small[0], huge, small[1]], max_events=max_events, max_bytes=cap, envelope_format=fmt)
    )
    oversized = [i for i in items if isinstance(i, Oversized)]
    assert [o.event for o in oversized] == [huge]
    assert oversized[0].size_bytes > cap
    assert carried(items) == small
    assert all(m.size_bytes <= cap for m in messages(items))


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_event_exactly_at_the_cap_is_sent(fmt: EnvelopeFormat) -> None:
    e = events_of("acme/orders", 1)[0]
    alone = list(pack([e], max_events=1, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES, envelope_format=fmt))
    exact = messages(alone)[0].size_bytes
    assert exact == record_bytes(e.topic.encode(), e.to_json().encode())
    assert messages(list(pack([e], max_events=1, max_bytes=exact, envelope_format=fmt)))
    assert not messages(list(pack([e], max_events=1, max_bytes=exact - 1, envelope_format=fmt)))
    enveloped = messages(
        list(pack([e], max_events=500, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES, envelope_format=fmt))
    )
    exact = enveloped[0].size_bytes
    assert messages(list(pack([e], max_events=500, max_bytes=exact, envelope_format=fmt)))
    below = list(pack([e], max_events=500, max_bytes=exact - 1, envelope_format=fmt))
    assert [o.size_bytes for o in below if isinstance(o, Oversized)] == [exact]


@settings(max_examples=150, deadline=None)
@given(
    spec=st.lists(
        st.tuples(st.sampled_from(["a/x", "b/yy", "c/zzz"]), st.integers(1, 3000)),
        max_size=60,
    ),
    max_events=st.integers(0, 40),
    max_bytes=st.integers(200, 20_000),
    fmt=st.sampled_from(FORMATS),
)
def test_any_events_any_caps(
    spec: list[tuple[str, int]], max_events: int, max_bytes: int, fmt: EnvelopeFormat
) -> None:
    events = [
        event(f"persistent://{ns}/{'n' * length}-{i}", i, broker=None if i % 3 else "b:8080")
        for i, (ns, length) in enumerate(spec)
    ]
    items = list(pack(events, max_events=max_events, max_bytes=max_bytes, envelope_format=fmt))
    sent = messages(items)
    oversized = [i.event for i in items if isinstance(i, Oversized)]
    assert all(m.size_bytes <= max_bytes for m in sent)
    assert all(
        DefaultRecordBatchBuilder.estimate_size_in_bytes(m.key, m.value, []) <= max_bytes
        for m in sent
    )
    assert all(m.events <= max(1, max_events) for m in sent)
    assert all(is_arrow_envelope(m.value) == (fmt == "arrow" and max_events > 1) for m in sent)
    # Every event exactly once: sent or oversized; sent ones in their order per namespace.
    got = carried(items)
    assert sorted(e.topic for e in got + oversized) == sorted(e.topic for e in events)
    for ns in ("a/x", "b/yy", "c/zzz"):
        assert [e for e in got if e.namespace == ns] == [
            e for e in events if e.namespace == ns and e not in oversized
        ]
    # Oversized only when the event cannot go alone.
    for e in oversized:
        alone = list(pack([e], max_events=max_events, max_bytes=10**7, envelope_format=fmt))
        assert messages(alone)[0].size_bytes > max_bytes
