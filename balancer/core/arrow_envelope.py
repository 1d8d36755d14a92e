"""Arrow envelopes: many topic-stats events in one Kafka message, as an Arrow IPC stream.

    raw = encode_envelope(events)            # the collector
    if is_arrow_envelope(raw):               # a reader: the first byte tells the formats apart
        batch = decode_envelope(raw)         # the record batch, or the Rejection of the message
        results = envelope_events(batch)     # one TopicStatsEvent or Rejection per row

A JSON envelope costs a reader ~1-1.6 us an event to decode and ~2 us more to build columns
from per-event objects; an Arrow IPC stream of 100 events reads in ~0.3-0.5 us an event,
columns ready (docs/decisions.md#arrow-envelopes-from-the-collector-issue-42).

Format, version 1: an Arrow IPC *stream* (`pyarrow.ipc.new_stream`) holding the schema
`ENVELOPE_SCHEMA` (these fields, in this order, of these types; its metadata names the
version), exactly one record batch, no IPC compression (Kafka compresses its batches), then
the end-of-stream marker, and nothing after it. A stream starts with the continuation marker
`FF FF FF FF`; no JSON text starts with byte 0xFF. Each row is one event with the meaning of
the JSON event fields of the same names: `validate_event` judges it, a null `broker` is no
broker (as JSON's null or absent key), a null anywhere else is that field's wrong type.

Purely computational: bytes in, Arrow and events out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import partial
from typing import Final

import pyarrow as pa

from balancer.core.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    MAX_MESSAGE_BYTES,
    Rejection,
    RejectReason,
    TopicStatsEvent,
    validate_event,
)

MAGIC: Final = b"\xff\xff\xff\xff"  # Arrow IPC's continuation marker, first in every message
METADATA_KEY: Final = b"pulsar_balancer_envelope"
VERSION: Final = b"1"

ENVELOPE_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("timestamp_ms", pa.int64()),
        ("msgRateIn", pa.float64()),
        ("msgRateOut", pa.float64()),
        ("msgThroughputIn", pa.float64()),
        ("msgThroughputOut", pa.float64()),
        ("storageSize", pa.int64()),
        ("backlogSize", pa.int64()),
        ("offloadedStorageSize", pa.int64()),
        ("producerCount", pa.int64()),
        ("consumerCount", pa.int64()),
        ("broker", pa.string()),
    ],
    metadata={METADATA_KEY: VERSION},
)
_END: Final = MAGIC + b"\x00\x00\x00\x00"  # the end-of-stream marker
_FIELDS: Final = tuple((f.name, f.type) for f in ENVELOPE_SCHEMA)
_NAMES: Final = tuple(ENVELOPE_SCHEMA.names)


def is_arrow_envelope(raw: bytes) -> bool:
    """Whether a message is (meant as) an Arrow envelope: JSON never starts with 0xFF."""
    return raw[:4] == MAGIC


def encode_envelope(events: Sequence[TopicStatsEvent]) -> bytes:
    """The Arrow envelope of `events`, in their order."""
    columns = [
        pa.array([getattr(e, name) for e in events], type=arrow_type)
        for name, arrow_type in _FIELDS
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ENVELOPE_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ENVELOPE_SCHEMA) as writer:  # no compression by default
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def decode_envelope(raw: bytes) -> pa.RecordBatch | Rejection:
    """The envelope's record batch (its data checked, its schema `ENVELOPE_SCHEMA`'s), or the
    reason the whole message is refused (`too_large` or `bad_arrow`). Never raises."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return Rejection(RejectReason.TOO_LARGE, f"message of {len(raw)} bytes is too large")
    try:
        return _read(raw)
    except _Refused as exc:
        return Rejection(RejectReason.BAD_ARROW, str(exc))
    except (pa.ArrowException, ValueError, OSError, struct.error, IndexError) as exc:
        return Rejection(RejectReason.BAD_ARROW, f"not an Arrow IPC stream: {str(exc)[:120]}")


def envelope_events(
    batch: pa.RecordBatch,
    *,
    now_ms: int | None = None,
    max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_MS,
    clusters: frozenset[str] | None = None,
) -> list[TopicStatsEvent | Rejection]:
    """One verdict per row of a decoded envelope, exactly `validate_event`'s for the row as a
    JSON object (the exact path: a dict per row; readers keep well-formed rows columnar)."""
    validate = partial(
        validate_event, now_ms=now_ms, max_future_skew_ms=max_future_skew_ms, clusters=clusters
    )
    return [validate(row) for row in batch.to_pylist()]


class _Refused(ValueError):
    """A readable stream that is not an envelope of version 1 (the message says why)."""


def _read(raw: bytes) -> pa.RecordBatch:
    """The stream's one batch, framed by hand: a `MessageReader` took ~3x as long (~48 us a
    message of 100 events against ~17 us, AMD EPYC, 2026-11-29), as much as the rest of the
    read task's work on its rows. Each message is `FF FF FF FF`, its metadata's length
    (int32, padding included), the metadata (a flatbuffer), then its body."""
    buffer = pa.py_buffer(raw)
    schema_end = _message_start(raw, 0, "starts with its schema")
    schema = _schema(raw[:schema_end], buffer)
    batch_end = _message_start(raw, schema_end, "holds exactly one record batch, this has none")
    message = pa.ipc.read_message(buffer.slice(schema_end))
    if message.type != "record batch":
        raise _Refused(f"an Arrow envelope holds one record batch, not a {message.type}")
    # Before reading it: a compressed body would be inflated to whatever it claims.
    if _compressed(raw[schema_end + 8 : batch_end]):
        raise _Refused("an Arrow envelope is not compressed inside (Kafka compresses)")
    end = batch_end + message.body.size
    rest = raw[end:]
    if rest != _END:
        if rest.startswith(_END):
            raise _Refused(f"{len(rest) - len(_END)} bytes follow the Arrow stream's end")
        if rest[:4] == MAGIC and len(rest) >= len(_END):
            raise _Refused("an Arrow envelope holds exactly one record batch, this has more")
        if _END.startswith(rest):
            raise _Refused("the Arrow stream has no end-of-stream marker (cut short?)")
        raise _Refused(f"{len(rest)} bytes of no IPC message follow the record batch")
    batch = pa.ipc.read_record_batch(message, schema)
    batch.validate(full=True)  # offsets in bounds, UTF-8 strings: before any value is read
    return batch


def _message_start(raw: bytes, at: int, expected: str) -> int:
    """Where the metadata of the message framed at `at` ends (its body, if any, follows)."""
    length = int.from_bytes(raw[at + 4 : at + 8], "little", signed=True)
    if raw[at : at + 4] != MAGIC or len(raw) < at + 8:
        raise _Refused(f"an Arrow envelope {expected}: no IPC message at byte {at}")
    if length == 0:  # the end-of-stream marker
        raise _Refused(f"an Arrow envelope {expected}: the stream ends at byte {at}")
    if length < 0 or at + 8 + length > len(raw):
        raise _Refused(f"an Arrow envelope {expected}: a message of {length} bytes at byte {at}")
    return at + 8 + length


def _schema(framed: bytes, buffer: pa.Buffer) -> pa.Schema:
    """The stream's schema if it is the envelope's (by its bytes when seen before: checking
    the fields costs ~15 us a message, a third of reading one)."""
    schema = _ACCEPTED.get(framed)
    if schema is None:
        message = pa.ipc.read_message(buffer.slice(0, len(framed)))
        if message.type != "schema" or message.body.size:
            raise _Refused(f"an Arrow envelope starts with its schema, not a {message.type}")
        schema = pa.ipc.read_schema(message)
        _check_schema(schema)
        if len(_ACCEPTED) >= _MAX_ACCEPTED:  # a few spellings exist (writers, versions)
            _ACCEPTED.clear()
        _ACCEPTED[framed] = schema
    return schema


# Schema messages accepted before, by their bytes (refused ones are not remembered).
_ACCEPTED: dict[bytes, pa.Schema] = {}
_MAX_ACCEPTED: Final = 64


def _check_schema(schema: pa.Schema) -> None:
    version = (schema.metadata or {}).get(METADATA_KEY)
    if version != VERSION:
        shown = "none" if version is None else repr(version[:20])
        raise _Refused(f"unknown Arrow envelope version {shown} (this reader knows 1)")
    fields = tuple((f.name, f.type) for f in schema)
    if fields != _FIELDS:
        got = ", ".join(f"{name}: {arrow_type}" for name, arrow_type in fields[:16])
        raise _Refused(f"not the Arrow envelope schema: got {got[:300]}")


def _compressed(metadata: bytes) -> bool:
    """Whether a record batch message's flatbuffer (Arrow's Message.fbs) sets `compression`.

    Message: version (field 0), header_type (1), header (2: the RecordBatch); RecordBatch:
    length (0), nodes (1), buffers (2), compression (3). A field absent from a table's vtable
    (offset 0) is unset. Out-of-range offsets raise struct.error: the message is refused.
    """
    message = _table(metadata, struct.unpack_from("<I", metadata, 0)[0])
    header_field = _field(metadata, message, 2)
    if header_field == 0:
        return False
    header_at = message + header_field
    batch = _table(metadata, header_at + struct.unpack_from("<I", metadata, header_at)[0])
    return _field(metadata, batch, 3) != 0


def _table(buf: bytes, at: int) -> int:
    if not 0 <= at < len(buf):
        raise IndexError("flatbuffer table out of range")
    return at


def _field(buf: bytes, table: int, index: int) -> int:
    """The offset of field `index` inside `table` (0: absent)."""
    vtable = _table(buf, table - struct.unpack_from("<i", buf, table)[0])
    vtable_bytes = struct.unpack_from("<H", buf, vtable)[0]
    slot = 4 + 2 * index
    if slot + 2 > vtable_bytes:
        return 0
    offset: int = struct.unpack_from("<H", buf, vtable + slot)[0]
    return offset


__all__ = [
    "ENVELOPE_SCHEMA",
    "MAGIC",
    "METADATA_KEY",
    "VERSION",
    "decode_envelope",
    "encode_envelope",
    "envelope_events",
    "is_arrow_envelope",
]
