"""Kafka messages of topic-stats events: envelopes under a byte cap, in Arrow or JSON.

    for item in pack(events, max_events=500, max_bytes=1 << 20, envelope_format="arrow"):
        if isinstance(item, Message): producer.send(key=item.key, value=item.value)
        else: ...  # Oversized: one event larger than max_bytes on its own

An envelope holds events of one namespace (its key) and is cut before it would pass
`max_events` events or `max_bytes` bytes. Its value is an Arrow IPC stream of one record
batch (`envelope_format="arrow"`, `balancer.core.arrow_envelope`, the default: the stream
reads its columns without a Python object per event) or `{"events": [...]}` (`"json"`, for
other consumers of the stats topic). `max_events` 0 or 1 gives one JSON event per message,
keyed by its topic name, in either format (what other producers send). The size of a
message is that of a Kafka record: key, value and `RECORD_OVERHEAD_BYTES` of framing, so no
message of `max_bytes` is refused by a producer or broker that allows `max_bytes`. An event
that cannot fit on its own is never sent (it would be refused): it comes out as
`Oversized`. Purely computational.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final, Literal, get_args

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

# The value of an envelope (collector.envelope_format). Arrow by default: the stream reads an
# Arrow envelope's columns in ~0.3-0.5 us an event against 3-5 us for the same events in
# JSON (docs/decisions.md#the-collector-sends-arrow-envelopes-issue-42).
EnvelopeFormat = Literal["arrow", "json"]
ENVELOPE_FORMATS: Final[tuple[str, ...]] = get_args(EnvelopeFormat)
DEFAULT_ENVELOPE_FORMAT: Final[EnvelopeFormat] = "arrow"

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
    events: Sequence[TopicStatsEvent],
    *,
    max_events: int,
    max_bytes: int,
    envelope_format: EnvelopeFormat = DEFAULT_ENVELOPE_FORMAT,
) -> Iterator[Message | Oversized]:
    """The messages carrying `events`, none over `max_bytes`; and the events that fit none."""
    if envelope_format not in ENVELOPE_FORMATS:
        raise ValueError(f"envelope_format must be one of {', '.join(ENVELOPE_FORMATS)}")
    if max_events <= 1:
        for e in events:
            # (surrogatepass: a name Arrow refused still gets a key; the stream rejects it)
            key, value = e.topic.encode("utf-8", "surrogatepass"), e.to_json().encode()
            size = record_bytes(key, value)
            yield Message(key, value, 1) if size <= max_bytes else Oversized(e, size)
        return
    by_namespace: dict[str, list[TopicStatsEvent]] = {}
    for e in events:
        by_namespace.setdefault(e.namespace, []).append(e)
    pack_namespace = _pack_arrow if envelope_format == "arrow" else _pack_json
    for namespace, items in by_namespace.items():
        yield from pack_namespace(namespace.encode(), items, max_events, max_bytes)


def _pack_json(
    key: bytes, items: Sequence[TopicStatsEvent], max_events: int, max_bytes: int
) -> Iterator[Message | Oversized]:
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
            yield _json_envelope(key, chunk)
            chunk, size = [], 0
        size += len(body) + (len(_SEP) if chunk else 0)
        chunk.append(body)
    if chunk:
        yield _json_envelope(key, chunk)


def _json_envelope(key: bytes, bodies: list[bytes]) -> Message:
    # The same bytes as json.dumps({"events": [...]}, separators=(",", ":")).
    return Message(key, _OPEN + _SEP.join(bodies) + _CLOSE, len(bodies))


# An Arrow envelope's size is not a sum over its events (buffers are padded, the schema and
# the batch header are fixed costs), so the cut is made on an estimate and checked on the
# bytes: events are added while `arrow_size_estimate` stays within the cap, the envelope is
# encoded, and one that still comes out over the cap is split in halves until each fits.
# The estimate is an upper bound for every envelope of valid events (tested), so the
# halving is a safety net, and each encode is the one the message needs.


def _pack_arrow(
    key: bytes, items: Sequence[TopicStatsEvent], max_events: int, max_bytes: int
) -> Iterator[Message | Oversized]:
    budget = max_bytes - record_bytes(key, b"")  # bytes the value may take
    fixed = _arrow_fixed_bytes()
    chunk: list[TopicStatsEvent] = []
    size = fixed
    for e in items:
        row = arrow_row_bytes(e)
        if chunk and (len(chunk) >= max_events or size + row > budget):
            yield from arrow_envelopes(key, chunk, budget)
            chunk, size = [], fixed
        if fixed + row > budget:  # perhaps too large alone: the bytes decide
            yield from arrow_envelopes(key, [e], budget)
            continue
        chunk.append(e)
        size += row
    if chunk:
        yield from arrow_envelopes(key, chunk, budget)


def arrow_envelopes(
    key: bytes, events: Sequence[TopicStatsEvent], budget: int
) -> Iterator[Message | Oversized]:
    """`events` (in order) in Arrow envelopes whose values take at most `budget` bytes: all
    in one, or split in halves until each fits; an event over `budget` alone is Oversized."""
    from balancer.core.arrow_envelope import encode_envelope  # pyarrow: only when sending

    try:
        value: bytes | None = encode_envelope(events)
    except (ValueError, TypeError, ArithmeticError):  # a lone surrogate, an int over 2^63
        value = None
    if value is not None and len(value) <= budget:
        yield Message(key, value, len(events))
    elif len(events) > 1:
        half = len(events) // 2
        yield from arrow_envelopes(key, events[:half], budget)
        yield from arrow_envelopes(key, events[half:], budget)
    elif value is not None:
        yield Oversized(events[0], record_bytes(key, value))
    else:
        # An event Arrow cannot hold goes as JSON: the stream rejects it with its reason
        # (bad_encoding, wrong_type) and dead-letters it, as it would from the JSON format.
        yield from pack(events, max_events=1, max_bytes=budget + record_bytes(key, b""))


def arrow_size_estimate(events: Sequence[TopicStatsEvent]) -> int:
    """At least the bytes of `events`' Arrow envelope (see `_pack_arrow`)."""
    return _arrow_fixed_bytes() + sum(arrow_row_bytes(e) for e in events)


# Per row: ten 8-byte numbers, three 4-byte string offsets, a validity bit of the broker.
_ROW_FIXED_BYTES = 10 * 8 + 3 * 4 + 1
# Each of the envelope's 16 body buffers is padded to 8 bytes; the one extra offset per
# string column; the batch header's numbers, left out when 0, grow it by up to 8 B each.
_PADDING_BYTES = 16 * 7 + 3 * 4 + 64


def arrow_row_bytes(e: TopicStatsEvent) -> int:
    """What one event adds to an Arrow envelope, at most."""
    return _ROW_FIXED_BYTES + _utf8_len(e.cluster) + _utf8_len(e.topic) + _utf8_len(e.broker)


def _utf8_len(text: str | None) -> int:
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@cache
def _arrow_fixed_bytes() -> int:
    # The schema message, the batch's header and the end-of-stream marker: what an envelope
    # of one event takes beyond that event's row, with room for the padding.
    from balancer.core.arrow_envelope import encode_envelope

    probe = TopicStatsEvent("c", "persistent://t/n/x", 946_684_800_000, *(0.0,) * 4, *(0,) * 5)
    return len(encode_envelope([probe])) - arrow_row_bytes(probe) + _PADDING_BYTES
