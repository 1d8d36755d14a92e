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

Topic names go through the same rule: `TopicInfoCache` accepts a name on the fast path only
in its canonical full form (`persistent://tenant/ns/local`, what collectors send); anything
else is normalised by `balancer.core.topics.parse_topic`. The PIP-157 bucket of the names first
seen in a batch is computed vectorised (`java_hash_codes`), since per-character Python
loops would cost more than everything else together when millions of topics report.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from operator import attrgetter, itemgetter
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
from balancer.core.hashing import hash_position, hash_positions
from balancer.core.topics import InvalidTopicName, parse_topic
from streaming.topic_keys import topic_hash, topic_hashes

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
    if joined.count(b'"') != quotes:
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
        return raw.count(b'"') == quotes
    # A string value equal to a key name only sends the message to the slow path.
    if any(raw.count(key) != n for key in _KEYS) or raw.count(_BROKER_KEY) != brokers:
        return False
    if envelope and raw.count(_ENVELOPE_KEY) != 1:
        return False
    return _ESCAPED_KEY.search(raw) is None


# A canonical full name whose parts parse_topic accepts unchanged: domain, tenant and
# namespace in Pulsar's NamedEntity alphabet, a non-empty local name without "/", no
# trailing whitespace (parse_topic rejects surrounding whitespace).
_CANONICAL: Final = re.compile(
    r"(persistent|non-persistent)://([-=:.\w]+/[-=:.\w]+)/([^/]+)", re.ASCII
)


# gc=False: a read task's cache holds an info per topic (up to half a million), which the
# collector would otherwise scan on every full collection (~20 % of a cold task's time).
class TopicInfo(msgspec.Struct, gc=False):
    """What the stream needs of a topic: full name, namespace, hash position, key part, bucket."""

    full: str
    namespace: str
    local_name: str
    position: int  # hash_position(full)
    key_part: int  # topic_hash(full): the topic's part of its key (streaming.topic_keys)
    bucket: int = -1  # filled by TopicInfoCache.fill_buckets


def _info(full: str, namespace: str, local_name: str) -> TopicInfo:
    return TopicInfo(full, namespace, local_name, hash_position(full), topic_hash(full))


def topic_info(name: str) -> TopicInfo | None:
    """The info of any accepted spelling of a topic name; None when Pulsar would reject it."""
    match = _CANONICAL.fullmatch(name)
    if match is not None and not name[-1].isspace():
        return _info(name, match.group(2), match.group(3))
    try:
        parsed = parse_topic(name)
    except InvalidTopicName:
        return None
    return _info(parsed.full, parsed.namespace_name, parsed.local_name)


def topic_infos(names: Sequence[str]) -> list[TopicInfo | None]:
    """`topic_info` of each name; canonical names (what collectors send) in C loops.

    The cache's cold path: at 10M topics a read task meets most names for the first time,
    and four calls per name cost more than the hashing itself. The regex only checks: a
    canonical name's namespace lies between "://" and its last "/", so no match object
    outlives its check (a list of them kept the garbage collector busy: ~40 % of this
    function for a million names).
    """
    if not all(map(_CANONICAL.fullmatch, names)) or any(map(str.isspace, map(_LAST, names))):
        return [topic_info(name) for name in names]  # another spelling, or not a name: rare
    cuts = [name.rfind("/") for name in names]
    namespaces = [name[name.find("://") + 3 : cut] for name, cut in zip(names, cuts, strict=True)]
    local_names = [name[cut + 1 :] for name, cut in zip(names, cuts, strict=True)]
    return list(
        map(TopicInfo, names, namespaces, local_names, hash_positions(names), topic_hashes(names))
    )


_LAST: Final = itemgetter(-1)


class TopicInfoCache:
    """Topic name as sent -> `TopicInfo`, bounded (cleared whole when full).

    Python workers are reused across micro-batches, so a module-level instance keeps the
    names of a stable topic population between batches. A bucket depends on the number of
    buckets, so the cache holds the infos of one number at a time (cleared when it changes).
    """

    def __init__(self, *, max_entries: int = 1 << 19) -> None:
        self.max_entries = max_entries
        self._infos: dict[str, TopicInfo | None] = {}
        self._num_buckets = 0
        self._unbucketed: dict[int, list[TopicInfo]] = {}

    def clear(self) -> None:
        """Forget every name (benchmarks of the cold path)."""
        self._infos = {}
        self._unbucketed = {}

    def _infos_for(self, num_buckets: int) -> dict[str, TopicInfo | None]:
        if num_buckets != self._num_buckets:
            self._infos = {}  # pending infos keep their own number in _unbucketed
            self._num_buckets = num_buckets
        return self._infos

    def get(self, name: str, num_buckets: int) -> TopicInfo | None:
        infos = self._infos_for(num_buckets)
        info = infos.get(name, _MISSING)
        if info is not _MISSING:
            return info  # type: ignore[return-value]
        if len(infos) >= self.max_entries:
            infos.clear()
        info = topic_info(name)
        infos[name] = info
        if info is not None:
            self._unbucketed.setdefault(num_buckets, []).append(info)
        return info

    def get_many(self, names: list[str], num_buckets: int) -> list[TopicInfo | None]:
        """`get` of each name; names already seen are looked up in one C loop, the others
        computed together (`topic_infos`)."""
        infos = self._infos_for(num_buckets)
        found = list(map(infos.get, names))
        if None not in found:
            return found
        # None is also what a name known to be invalid maps to.
        missing = [name for name in dict.fromkeys(names) if name not in infos]
        if not missing:
            return found
        computed = topic_infos(missing)
        if len(infos) + len(missing) > self.max_entries:
            infos.clear()
        fresh = dict(zip(missing, computed, strict=True))
        infos.update(fresh)
        self._unbucketed.setdefault(num_buckets, []).extend(
            info for info in computed if info is not None
        )
        return [fresh.get(n) if i is None else i for n, i in zip(names, found, strict=True)]

    def fill_buckets(self) -> None:
        """Compute the buckets of the names first seen since the last call (vectorised)."""
        for num_buckets, pending in self._unbucketed.items():
            codes = java_hash_codes([info.local_name for info in pending])
            buckets = np.abs(codes.astype(np.int64)) % num_buckets
            for info, bucket in zip(pending, buckets.tolist(), strict=True):
                info.bucket = bucket
        self._unbucketed = {}


_MISSING: Final = object()


def java_hash_codes(texts: Sequence[str]) -> np.ndarray:
    """Java's `String.hashCode()` of each text (signed 32-bit), computed in one numpy pass.

    h = sum(unit[i] * 31^(n-1-i)) mod 2^32 over the UTF-16 code units; uint32 arithmetic
    wraps exactly like Java's int.
    """
    if not texts:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(texts).encode("utf-16-le")
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    if len(joined) != 2 * int(lengths.sum()):  # a character beyond the BMP: 2 code units
        units_of = (len(text.encode("utf-16-le")) // 2 for text in texts)
        lengths = np.fromiter(units_of, dtype=np.int64, count=len(texts))
    units = np.frombuffer(joined, dtype="<u2").astype(np.uint32)
    out = np.zeros(len(texts), dtype=np.uint32)
    if units.size:
        ends = np.cumsum(lengths)
        starts = ends - lengths
        powers = np.ones(int(lengths.max()), dtype=np.uint32)
        if powers.size > 1:
            powers[1:] = 31
            powers = np.cumprod(powers, dtype=np.uint32)
        exponents = np.repeat(ends - 1, lengths) - np.arange(units.size, dtype=np.int64)
        terms = units * powers[exponents]
        nonempty = lengths > 0
        out[nonempty] = np.add.reduceat(terms, starts[nonempty], dtype=np.uint32)
    return out.view(np.int32)


__all__ = [
    "FastEvent",
    "TopicInfo",
    "TopicInfoCache",
    "decode_fast",
    "decode_single_events",
    "java_hash_codes",
    "topic_info",
    "topic_infos",
]
