"""Kafka messages of topic-stats events: envelopes `{"events": [...]}` under a byte cap.

    for item in pack(events, max_events=500, max_bytes=1 << 20):
        if isinstance(item, Message): producer.send(key=item.key, value=item.value)
        else: ...  # Oversized: one event larger than max_bytes on its own

An envelope holds events of one namespace (its key) and is cut before it would pass
`max_events` events or `max_bytes` bytes; `max_events` 0 or 1 gives one event per message,
keyed by its topic name. The size of a message is that of a Kafka record: key, value and
`RECORD_OVERHEAD_BYTES` of framing, so no message of `max_bytes` is refused by a producer or
broker that allows `max_bytes`. An event that cannot fit on its own is never sent (it would
be refused): it comes out as `Oversized`. Purely computational.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from balancer.core.events import TopicStatsEvent

# Defaults of collector.envelope_max_events and collector.envelope_max_bytes (balancer.app.config).
# 500 events of ~300 B make envelopes of ~150 KB, well under the byte cap, so the cap only
# cuts envelopes of unusually long topic names. Per Kafka record the stream pays a fixed
# cost (fetch, record framing, one JSON document); in envelopes that cost is spread over
# hundreds of events (parsing ~5 us per event against ~10 us one per message,
# docs/decisions.md#envelopes-from-the-collector), and 10M topics a minute are 20k records
# a minute.
DEFAULT_ENVELOPE_MAX_EVENTS = 500
# Kafka's default max.message.bytes is 1 MiB + 12 B, and kafka-python's max_request_size
# 1 MiB: a record of at most 1 MiB, framing included, passes both.
DEFAULT_ENVELOPE_MAX_BYTES = 1024 * 1024
# What Kafka adds to a record's key and value, at most: the record batch header (61 B) and
# the record's own lengths, deltas and attributes (varints: kafka-python bounds them by 26 B).
RECORD_OVERHEAD_BYTES = 128

_OPEN, _SEP, _CLOSE = b'{"events":[', b",", b"]}"


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes
    value: bytes
    events: int

    @property
    def size_bytes(self) -> int:
        return record_bytes(self.key, self.value)


@dataclass(frozen=True, slots=True)
class Oversized:
    """An event whose message alone would pass the cap: not sent."""

    event: TopicStatsEvent
    size_bytes: int  # the smallest message it could go in


def record_bytes(key: bytes, value: bytes) -> int:
    """The size of a Kafka record of `key` and `value`, framing included (an upper bound)."""
    return len(key) + len(value) + RECORD_OVERHEAD_BYTES


def pack(
    events: Sequence[TopicStatsEvent], *, max_events: int, max_bytes: int
) -> Iterator[Message | Oversized]:
    """The messages carrying `events`, none over `max_bytes`; and the events that fit none."""
    if max_events <= 1:
        for e in events:
            key, value = e.topic.encode(), e.to_json().encode()
            size = record_bytes(key, value)
            yield Message(key, value, 1) if size <= max_bytes else Oversized(e, size)
        return
    by_namespace: dict[str, list[TopicStatsEvent]] = {}
    for e in events:
        by_namespace.setdefault(e.namespace, []).append(e)
    for namespace, items in by_namespace.items():
        key = namespace.encode()
        # Bytes the events and their separators may take in one envelope of this key.
        budget = max_bytes - record_bytes(key, _OPEN + _CLOSE)
        chunk: list[bytes] = []
        size = 0
        for e in items:
            body = e.to_json().encode()
            if len(body) > budget:
                yield Oversized(e, len(body) + max_bytes - budget)
                continue
            if chunk and (len(chunk) >= max_events or size + len(_SEP) + len(body) > budget):
                yield _envelope(key, chunk)
                chunk, size = [], 0
            size += len(body) + (len(_SEP) if chunk else 0)
            chunk.append(body)
        if chunk:
            yield _envelope(key, chunk)


def _envelope(key: bytes, bodies: list[bytes]) -> Message:
    # The same bytes as json.dumps({"events": [...]}, separators=(",", ":")).
    return Message(key, _OPEN + _SEP.join(bodies) + _CLOSE, len(bodies))
