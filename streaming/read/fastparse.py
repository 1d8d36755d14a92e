"""The hot path of event parsing: typed decoding of well-formed messages, exact by construction.

`balancer.core.events.parse_message` is the one definition of a valid event; it builds a Python
dict per event and checks it field by field (~30-40 us an event). Nearly every message in a
healthy stream is well-formed, so the read tasks first try `decode_fast`: msgspec decodes
the message straight into typed structs whose constraints are *at least as strict* as
`validate_event` (strict types, no unknown fields, bounds on every number). When msgspec
accepts a message, `validate_event` accepts it with the same values; whenever msgspec
refuses (a count written as `5.0`, a bad event inside an envelope, NaN, garbage...), the
caller falls back to `parse_message`, which gives the exact verdict and reason. A shared
test table and property tests keep the two in agreement (tests/streaming/test_fastparse.py).

Topic names go through the same rule: `streaming.read.topic_columns.CanonicalNames` accepts a
name on the fast path only in its canonical full form (`persistent://tenant/ns/local`, what
collectors send); anything else is normalised by `balancer.core.topics.parse_topic`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from operator import attrgetter
from typing import Annotated, Final

import msgspec
import numpy as np

from balancer.core.events import (
    MAX_MESSAGE_BYTES,
    MAX_RATE,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    OPTIONAL_FIELDS,
    REQUIRED_FIELDS,
)

_MAX_FLOAT: Final = sys.float_info.max
_MAX_INT64: Final = 2**63 - 1

# The constraints mirror validate_event's checks; anything outside them takes the slow path.
_Name = Annotated[str, msgspec.Meta(min_length=1)]
# Non-negative and below MAX_RATE. `lt`, not `le`: an integer literal just above MAX_RATE
# (which validate_event rejects) may decode rounded down to exactly MAX_RATE; the slow path
# decides.
_Rate = Annotated[float, msgspec.Meta(ge=0.0, lt=MAX_RATE)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=_MAX_INT64)]
_Timestamp = Annotated[int, msgspec.Meta(ge=MIN_TIMESTAMP_MS, lt=MAX_TIMESTAMP_MS)]


# gc=False: an event holds only strings and numbers (no cycles possible), so the garbage
# collector need not track the millions of them a read task creates.
class FastEvent(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    """A topic-stats event as msgspec decodes it (`topic` still as sent)."""

    cluster: _Name
    topic: _Name
    timestamp_ms: _Timestamp
    msgRateIn: _Rate
    msgRateOut: _Rate
    msgThroughputIn: _Rate
    msgThroughputOut: _Rate
    storageSize: _Count
    backlogSize: _Count
    offloadedStorageSize: _Count
    producerCount: _Count
    consumerCount: _Count
    # UNSET tells an absent broker from `"broker": null`: the duplicate-key check counts keys.
    broker_sent: str | msgspec.UnsetType | None = msgspec.field(
        default=msgspec.UNSET, name="broker"
    )

    @property
    def broker(self) -> str | None:
        return None if isinstance(self.broker_sent, msgspec.UnsetType) else self.broker_sent


class _Envelope(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    events: list[FastEvent]


_EVENT_DECODER: Final = msgspec.json.Decoder(FastEvent)
_ENVELOPE_DECODER: Final = msgspec.json.Decoder(_Envelope)
_ENVELOPE_KEY: Final = b'"events"'
# msgspec raises DecodeError/ValidationError for bad JSON or types, but a plain
# UnicodeDecodeError (a ValueError) for invalid UTF-8 inside a string.
_REFUSED: Final = (msgspec.MsgspecError, ValueError)
_KEYS: Final = tuple(f'"{name}"'.encode() for name in REQUIRED_FIELDS)
_BROKER_KEY: Final = f'"{OPTIONAL_FIELDS[0]}"'.encode()
# A key spelled with escapes (`"clust\u0065r"`): letters, digits and \uXXXX, then a colon.
_BACKSLASH: Final = b"\\"
_ESCAPED_KEY: Final = re.compile(rb'"[\w\\]*\\u[0-9a-fA-F]{4}[\w\\]*"\s*:')
_BROKER_SENT: Final = attrgetter("broker_sent")
_QUOTE: Final = ord('"')
# From this many bytes, numpy counts a message's quotes: `bytes.count` of one byte is a
# scalar loop (~0.7 ns a byte here), numpy's compare-and-count a vector one with ~4 us of
# fixed cost (AMD EPYC, 2026-11-29); an envelope of 100 events is ~30 KB.
NUMPY_COUNT_MIN_BYTES: Final = 8192


def count_quotes(raw: bytes) -> int:
    """`raw.count(b'"')`, by the cheaper of two exact counts."""
    if len(raw) < NUMPY_COUNT_MIN_BYTES:
        return raw.count(b'"')
    return int(np.count_nonzero(np.frombuffer(raw, np.uint8) == _QUOTE))


def decode_fast(raw: bytes) -> list[FastEvent] | None:
    """The events of a well-formed message, or None: then ask `parse_message`.

    Never raises. A message is either a single event or `{"events": [...]}`; the cheap guess
    of which only chooses the decoder tried first.
    """
    if len(raw) > MAX_MESSAGE_BYTES:
        return None
    decoded = _decode(raw)
    if decoded is None:
        return None
    events, envelope = decoded
    if not _keys_unique(raw, events, envelope=envelope):
        return None
    return events


def decode_single_events(values: Sequence[bytes | None]) -> list[FastEvent] | None:
    """One event per message for a whole run of messages, or None: then take them one by one.

    With one event per message, the per-message Python around msgspec costs more than the
    decoding itself, so a run is checked at once. Exact by construction: the result is the
    events `decode_fast` gives message by message, when every message is a single event it
    accepts. An envelope never decodes as an event (no unknown fields), so the decoder
    order `decode_fast` guesses does not matter. The duplicate-key check of
    `_keys_unique` is summed over the run: without a backslash, each message has at least
    as many quotes as its keys and strings need, so the totals are equal only if every
    message's are.
    """
    if not values:
        return []
    first = values[0]
    if first is None or _looks_like_envelope(first):
        return None  # envelopes: not worth copying the run to find out
    try:
        joined = b"".join(values)  # type: ignore[arg-type]  # a None refuses the run
    except TypeError:
        return None
    if _BACKSLASH in joined or max(map(len, values)) > MAX_MESSAGE_BYTES:  # type: ignore[arg-type]
        return None
    try:
        events = list(map(_EVENT_DECODER.decode, values))  # type: ignore[arg-type]
    except _REFUSED:
        return None
    quotes, _ = _quotes_and_brokers(events, envelopes=0)
    if count_quotes(joined) != quotes:
        return None
    return events


def _looks_like_envelope(raw: bytes) -> bool:
    """The cheap guess of the message's shape: only chooses what is tried first."""
    return _ENVELOPE_KEY in raw[:32]


def _decode(raw: bytes) -> tuple[list[FastEvent], bool] | None:
    """(events, whether it was an envelope), or None."""
    envelope_first = _looks_like_envelope(raw)
    try:
        if envelope_first:
            return _ENVELOPE_DECODER.decode(raw).events, True
        return [_EVENT_DECODER.decode(raw)], False
    except _REFUSED:
        pass
    try:
        if envelope_first:
            return [_EVENT_DECODER.decode(raw)], False
        return _ENVELOPE_DECODER.decode(raw).events, True
    except _REFUSED:
        return None


def _quotes_and_brokers(events: list[FastEvent], *, envelopes: int) -> tuple[int, int]:
    """The quotes messages of `events` hold without a backslash when no key repeats (each
    key and string value is quoted: the required keys, the `broker` keys sent, each
    envelope's `events`, cluster and topic, brokers sent as strings), and how many events
    sent `broker`. C loops: this runs for every event."""
    n = len(events)
    sent = list(map(_BROKER_SENT, events))
    brokers = n - sent.count(msgspec.UNSET)
    strings = 2 * n + brokers - sent.count(None)
    keys = len(_KEYS) * n + brokers + envelopes
    return 2 * (keys + strings), brokers


def _keys_unique(raw: bytes, events: list[FastEvent], *, envelope: bool) -> bool:
    """False unless no key was repeated (msgspec keeps the last of repeated keys silently).

    msgspec accepted the message, so every event holds each required key at least once.
    Without a backslash, quotes come only in pairs around string tokens, which are the keys
    and the string values: the count of quotes tells whether there are more keys than
    those seen (two passes over the bytes). With escapes, each key is counted by name.
    """
    n = len(events)
    quotes, brokers = _quotes_and_brokers(events, envelopes=int(envelope))
    if _BACKSLASH not in raw:
        return count_quotes(raw) == quotes
    # A string value equal to a key name only sends the message to the slow path.
    if any(raw.count(key) != n for key in _KEYS) or raw.count(_BROKER_KEY) != brokers:
        return False
    if envelope and raw.count(_ENVELOPE_KEY) != 1:
        return False
    return _ESCAPED_KEY.search(raw) is None


__all__ = [
    "NUMPY_COUNT_MIN_BYTES",
    "FastEvent",
    "count_quotes",
    "decode_fast",
    "decode_single_events",
]
