"""The topic-stats event: one typed record per topic stats sample, and its validation.

Used alike by the collector (which builds events from Pulsar's stats), the stream (which
validates every Kafka message) and the CLI. Field names are Pulsar's own so a collector can
pass stats through. Validation never raises for bad input: it returns a `Rejection` with a
reason from a fixed set (bounded, so it can label a metric) and a human-readable detail.

Three wire formats are accepted: one JSON object per message, a batched envelope
`{"events": [ {...}, ... ]}` carrying many topics' stats in one Kafka message, or an Arrow
envelope of the same events (`balancer.core.arrow_envelope`; its first byte is 0xFF).

Purely computational, with no side effects; the current time is passed in when wanted.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache, partial
from typing import Any, TypeGuard

from balancer.core.hashing import hash_position
from balancer.core.topics import InvalidTopicName, parse_topic

# Event time must lie in [2000-01-01, 2100-01-01): anything else is a unit mistake
# (seconds or microseconds instead of milliseconds) or garbage.
MIN_TIMESTAMP_MS = 946_684_800_000
MAX_TIMESTAMP_MS = 4_102_444_800_000
# A single Kafka message larger than this is not a stats sample (Kafka's default max is 1 MiB).
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A JSON integer literal can be longer than any float: treat it like an infinite rate.
_MAX_FLOAT = sys.float_info.max
# Upper bound of every rate (messages/s or bytes/s): 1e18 is an exabyte a second, millions
# of times any real topic; a larger value is garbage (1e300), not a load to act on.
MAX_RATE = 1e18
# Default of how far ahead of the reader's clock an event time may be (the stream setting
# spark.max_future_skew_s): an event stamped later would advance the watermark past the
# stream and make every on-time event late.
DEFAULT_MAX_FUTURE_SKEW_MS = 10 * 60_000

RATE_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
SIZE_FIELDS = ("storageSize", "backlogSize", "offloadedStorageSize")
COUNT_FIELDS = ("producerCount", "consumerCount")
REQUIRED_FIELDS = ("cluster", "topic", "timestamp_ms", *RATE_FIELDS, *SIZE_FIELDS, *COUNT_FIELDS)
OPTIONAL_FIELDS = ("broker",)


class RejectReason(StrEnum):
    """Why an event was rejected; a bounded set, usable as a metric label."""

    TOO_LARGE = "too_large"
    BAD_ENCODING = "bad_encoding"
    BAD_JSON = "bad_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    UNKNOWN_FIELD = "unknown_field"
    WRONG_TYPE = "wrong_type"
    NOT_FINITE = "not_finite"
    NEGATIVE_VALUE = "negative_value"
    INVALID_TOPIC = "invalid_topic"
    TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
    TIMESTAMP_IN_FUTURE = "timestamp_in_future"
    DUPLICATE_KEY = "duplicate_key"
    RATE_TOO_HIGH = "rate_too_high"
    UNKNOWN_CLUSTER = "unknown_cluster"
    # A message starting like an Arrow IPC stream that is not an Arrow envelope of a version
    # this reader knows (balancer.core.arrow_envelope): unreadable, another schema, not
    # exactly one batch, compressed inside, or bytes after the stream's end.
    BAD_ARROW = "bad_arrow"


@dataclass(frozen=True, slots=True)
class TopicStatsEvent:
    cluster: str
    topic: str  # always the normalised full name
    timestamp_ms: int
    msgRateIn: float
    msgRateOut: float
    msgThroughputIn: float
    msgThroughputOut: float
    storageSize: int
    backlogSize: int
    offloadedStorageSize: int
    producerCount: int
    consumerCount: int
    broker: str | None = None

    @property
    def namespace(self) -> str:
        """`tenant/namespace` of the topic."""
        rest = self.topic.split("://", 1)[1]
        tenant, ns, _ = rest.split("/", 2)
        return f"{tenant}/{ns}"

    @property
    def position(self) -> int:
        return hash_position(self.topic)

    @property
    def msg_rate(self) -> float:
        return self.msgRateIn + self.msgRateOut

    @property
    def throughput_bytes(self) -> float:
        return self.msgThroughputIn + self.msgThroughputOut

    @property
    def sessions(self) -> int:
        return self.producerCount + self.consumerCount

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in REQUIRED_FIELDS}
        if self.broker is not None:
            out["broker"] = self.broker
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: RejectReason
    detail: str


def _reject(reason: RejectReason, detail: str) -> Rejection:
    return Rejection(reason, detail)


def validate_event(
    obj: Any,
    *,
    now_ms: int | None = None,
    max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_MS,
    clusters: frozenset[str] | None = None,
) -> TopicStatsEvent | Rejection:
    """Check one decoded event object; a typed event or the reason it was rejected.

    `now_ms`, when given, also rejects event times further than `max_future_skew_ms` ahead;
    `clusters`, when given, rejects an event of any other cluster.
    """
    if not isinstance(obj, dict):
        return _reject(RejectReason.NOT_AN_OBJECT, f"event must be a JSON object, got {_kind(obj)}")
    if isinstance(obj, _DuplicateKeys):
        return _reject(RejectReason.DUPLICATE_KEY, f"duplicate key(s): {obj.duplicates}")
    missing = [f for f in REQUIRED_FIELDS if f not in obj]
    if missing:
        return _reject(RejectReason.MISSING_FIELD, f"missing field(s): {', '.join(missing)}")
    unknown = sorted(set(obj) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        return _reject(RejectReason.UNKNOWN_FIELD, f"unknown field(s): {', '.join(unknown[:5])}")
    for field in ("cluster", "topic"):
        if not isinstance(obj[field], str) or not obj[field]:
            return _reject(RejectReason.WRONG_TYPE, f"{field} must be a non-empty string")
    broker = obj.get("broker")
    if broker is not None and not isinstance(broker, str):
        return _reject(RejectReason.WRONG_TYPE, "broker must be a string or null")
    for field in ("cluster", "topic", "broker"):
        # JSON can escape a lone UTF-16 surrogate ("\ud800"): no valid text holds one.
        if obj.get(field) is not None and not _is_unicode_text(obj[field]):
            return _reject(RejectReason.BAD_ENCODING, f"{field} holds a lone surrogate escape")
    ts = obj["timestamp_ms"]
    if isinstance(ts, float) and ts.is_integer():
        ts = int(ts)  # JSON does not tell 1700000000000.0 from 1700000000000 (nor do counts)
    if not _is_int(ts):
        return _reject(RejectReason.WRONG_TYPE, f"timestamp_ms must be an integer, got {_kind(ts)}")
    if not MIN_TIMESTAMP_MS <= ts < MAX_TIMESTAMP_MS:
        return _reject(
            RejectReason.TIMESTAMP_OUT_OF_RANGE,
            f"timestamp_ms {ts} is outside 2000-01-01..2100-01-01 (milliseconds expected)",
        )
    if now_ms is not None and ts > now_ms + max_future_skew_ms:
        return _reject(
            RejectReason.TIMESTAMP_IN_FUTURE,
            f"timestamp_ms {ts} is {ts - now_ms} ms ahead of the reader's clock "
            f"(at most {max_future_skew_ms} ms allowed)",
        )
    rates: dict[str, float] = {}
    for field in RATE_FIELDS:
        value = obj[field]
        if not (_is_int(value) or isinstance(value, float)):
            return _reject(RejectReason.WRONG_TYPE, f"{field} must be a number, got {_kind(value)}")
        if _is_int(value) and abs(value) > _MAX_FLOAT:
            return _reject(RejectReason.NOT_FINITE, f"{field} is too large for a float")
        if not math.isfinite(value):
            return _reject(RejectReason.NOT_FINITE, f"{field} is {value}")
        if value < 0:
            return _reject(RejectReason.NEGATIVE_VALUE, f"{field} is negative ({value})")
        if value > MAX_RATE:
            return _reject(RejectReason.RATE_TOO_HIGH, f"{field} {value} is above {MAX_RATE:g}")
        rates[field] = float(value)
    counts: dict[str, int] = {}
    for field in (*SIZE_FIELDS, *COUNT_FIELDS):
        value = obj[field]
        if isinstance(value, float) and not math.isfinite(value):
            return _reject(RejectReason.NOT_FINITE, f"{field} is {value}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not _is_int(value):
            return _reject(
                RejectReason.WRONG_TYPE, f"{field} must be an integer, got {_kind(value)}"
            )
        if value < 0:
            return _reject(RejectReason.NEGATIVE_VALUE, f"{field} is negative ({value})")
        if value >= 2**63:
            return _reject(RejectReason.WRONG_TYPE, f"{field} {value} does not fit in 64 bits")
        counts[field] = value
    try:
        topic = _full_topic_name(obj["topic"])
    except InvalidTopicName as exc:
        return _reject(RejectReason.INVALID_TOPIC, str(exc))
    if clusters is not None and obj["cluster"] not in clusters:
        return _reject(
            RejectReason.UNKNOWN_CLUSTER, f"cluster {obj['cluster'][:100]!r} is not configured"
        )
    return TopicStatsEvent(
        cluster=obj["cluster"],
        topic=topic,
        timestamp_ms=ts,
        msgRateIn=rates["msgRateIn"],
        msgRateOut=rates["msgRateOut"],
        msgThroughputIn=rates["msgThroughputIn"],
        msgThroughputOut=rates["msgThroughputOut"],
        storageSize=counts["storageSize"],
        backlogSize=counts["backlogSize"],
        offloadedStorageSize=counts["offloadedStorageSize"],
        producerCount=counts["producerCount"],
        consumerCount=counts["consumerCount"],
        broker=broker,
    )


def parse_message(
    raw: bytes | str,
    *,
    now_ms: int | None = None,
    max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_MS,
    clusters: frozenset[str] | None = None,
) -> list[TopicStatsEvent | Rejection]:
    """Decode one Kafka message: a single event, a `{"events": [...]}` envelope or an Arrow
    envelope (`balancer.core.arrow_envelope`).

    Returns one result per event found (one Rejection for an undecodable message). A
    duplicate key rejects its object: the whole message when it is the envelope's.
    `now_ms`, `max_future_skew_ms` and `clusters` are as for `validate_event`.
    """
    if isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        if len(data) > MAX_MESSAGE_BYTES:
            return [_reject(RejectReason.TOO_LARGE, f"message of {len(data)} bytes is too large")]
        if data[:4] == b"\xff\xff\xff\xff":
            # Imported here: arrow_envelope builds on this module (and pyarrow loads only
            # for readers that meet an Arrow envelope).
            from balancer.core import arrow_envelope

            batch = arrow_envelope.decode_envelope(data)
            if isinstance(batch, Rejection):
                return [batch]
            return arrow_envelope.envelope_events(
                batch, now_ms=now_ms, max_future_skew_ms=max_future_skew_ms, clusters=clusters
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return [_reject(RejectReason.BAD_ENCODING, f"message is not UTF-8: {exc.reason}")]
    else:
        text = raw
        if len(text) > MAX_MESSAGE_BYTES:
            return [_reject(RejectReason.TOO_LARGE, f"message of {len(text)} chars is too large")]
    try:
        obj = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        return [_reject(RejectReason.BAD_JSON, f"not valid JSON: {str(exc)[:120]}")]
    validate = partial(
        validate_event, now_ms=now_ms, max_future_skew_ms=max_future_skew_ms, clusters=clusters
    )
    if isinstance(obj, dict) and "events" in obj and "topic" not in obj:
        if isinstance(obj, _DuplicateKeys):  # two "events" lists: neither can be trusted
            return [validate_event(obj)]
        batch = obj["events"]
        if not isinstance(batch, list) or len(obj) != 1:
            return [_reject(RejectReason.WRONG_TYPE, 'an envelope is {"events": [event, ...]}')]
        return [validate(item) for item in batch]
    return [validate(obj)]


def _reject_constant(name: str) -> float:
    # NaN/Infinity are not JSON; Python's parser accepts them unless told otherwise.
    raise ValueError(f"{name} is not valid JSON")


class _DuplicateKeys(dict[str, Any]):
    """A JSON object that repeated a key (the last value kept); never a valid event."""

    duplicates: str


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of repeated keys silently: a doubtful event must not pass.
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    counts = Counter(k for k, _ in pairs)
    repeated = sorted(k for k, n in counts.items() if n > 1)
    marked = _DuplicateKeys(obj)
    marked.duplicates = ", ".join(k[:40] for k in repeated[:5])
    return marked


# One decoder for every message (building one per call costs as much as a small decode).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_object)


@lru_cache(maxsize=65_536)
def _full_topic_name(name: str) -> str:
    # The same topics report every interval: parse each spelling once (errors are not cached).
    return parse_topic(name).full


def _is_unicode_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
