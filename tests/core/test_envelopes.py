"""Envelopes under a byte cap: every event carried once, in order; no message over the cap."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from balancer.core.envelopes import (
    DEFAULT_ENVELOPE_MAX_BYTES,
    DEFAULT_ENVELOPE_MAX_EVENTS,
    Message,
    Oversized,
    pack,
    record_bytes,
)
from balancer.core.events import TopicStatsEvent, parse_message
from streaming.read.fastparse import decode_fast


def event(topic: str, i: int = 0) -> TopicStatsEvent:
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
        broker="10.0.0.1:8080",
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


def test_default_envelopes_hold_500_events_of_one_namespace_keyed_by_it() -> None:
    events = events_of("acme/orders", 1200)
    items = list(
        pack(events, max_events=DEFAULT_ENVELOPE_MAX_EVENTS, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES)
    )
    assert [m.events for m in messages(items)] == [500, 500, 200]
    assert all(m.key == b"acme/orders" for m in messages(items))
    assert carried(items) == events
    # What the collector sends is exactly json.dumps of the envelope, and takes the fast path.
    first = messages(items)[0]
    body = {"events": [e.to_dict() for e in events[:500]]}
    assert first.value == json.dumps(body, separators=(",", ":")).encode()
    assert decode_fast(first.value) is not None
    assert first.size_bytes < DEFAULT_ENVELOPE_MAX_BYTES // 4  # ~150 KB: the cap rarely cuts


def test_each_namespace_has_envelopes_of_its_own() -> None:
    events = events_of("a/x", 3) + events_of("b/y", 2) + events_of("a/x", 1, name_len=20)
    items = list(pack(events, max_events=500, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES))
    assert [(m.key, m.events) for m in messages(items)] == [(b"a/x", 4), (b"b/y", 2)]


def test_the_byte_cap_cuts_envelopes_and_no_message_passes_it() -> None:
    events = events_of("acme/orders", 200)
    one = len(events[0].to_json())
    cap = 10 * one  # a handful of events per envelope
    items = list(pack(events, max_events=500, max_bytes=cap))
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


def test_one_event_per_message_is_keyed_by_topic() -> None:
    events = events_of("acme/orders", 3)
    for max_events in (0, 1):
        items = list(pack(events, max_events=max_events, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES))
        assert [(m.key, m.value, m.events) for m in messages(items)] == [
            (e.topic.encode(), e.to_json().encode(), 1) for e in events
        ]


@pytest.mark.parametrize("max_events", [1, 500])
def test_an_event_too_large_on_its_own_is_not_sent(max_events: int) -> None:
    small = events_of("acme/orders", 2)
    huge = event("persistent://acme/orders/" + "x" * 5000)
    cap = 4096
    items = list(pack([small[0], huge, small[1]], max_events=max_events, max_bytes=cap))
    oversized = [i for i in items if isinstance(i, Oversized)]
    assert [o.event for o in oversized] == [huge]
    assert oversized[0].size_bytes > cap
    assert carried(items) == small
    assert all(m.size_bytes <= cap for m in messages(items))


def test_an_event_exactly_at_the_cap_is_sent() -> None:
    e = events_of("acme/orders", 1)[0]
    alone = list(pack([e], max_events=1, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES))
    exact = messages(alone)[0].size_bytes
    assert exact == record_bytes(e.topic.encode(), e.to_json().encode())
    assert messages(list(pack([e], max_events=1, max_bytes=exact)))
    assert not messages(list(pack([e], max_events=1, max_bytes=exact - 1)))
    enveloped = messages(list(pack([e], max_events=500, max_bytes=DEFAULT_ENVELOPE_MAX_BYTES)))
    exact = enveloped[0].size_bytes
    assert messages(list(pack([e], max_events=500, max_bytes=exact)))
    assert not messages(list(pack([e], max_events=500, max_bytes=exact - 1)))


@settings(max_examples=150, deadline=None)
@given(
    spec=st.lists(
        st.tuples(st.sampled_from(["a/x", "b/yy", "c/zzz"]), st.integers(1, 3000)),
        max_size=60,
    ),
    max_events=st.integers(0, 40),
    max_bytes=st.integers(200, 20_000),
)
def test_any_events_any_caps(spec: list[tuple[str, int]], max_events: int, max_bytes: int) -> None:
    events = [
        event(f"persistent://{ns}/{'n' * length}-{i}", i) for i, (ns, length) in enumerate(spec)
    ]
    items = list(pack(events, max_events=max_events, max_bytes=max_bytes))
    sent = messages(items)
    oversized = [i.event for i in items if isinstance(i, Oversized)]
    assert all(m.size_bytes <= max_bytes for m in sent)
    assert all(
        DefaultRecordBatchBuilder.estimate_size_in_bytes(m.key, m.value, []) <= max_bytes
        for m in sent
    )
    assert all(m.events <= max(1, max_events) for m in sent)
    # Every event exactly once: sent or oversized; sent ones in their order per namespace.
    got = carried(items)
    assert sorted(e.topic for e in got + oversized) == sorted(e.topic for e in events)
    for ns in ("a/x", "b/yy", "c/zzz"):
        assert [e for e in got if e.namespace == ns] == [
            e for e in events if e.namespace == ns and e not in oversized
        ]
    # Oversized only when the event cannot go alone.
    for e in oversized:
        alone = list(pack([e], max_events=max_events, max_bytes=10**7))
        assert messages(alone)[0].size_bytes > max_bytes
