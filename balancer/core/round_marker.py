"""The collector's round marker: a stats-topic message promising that no topic-stats event
stamped before `until_ms` will follow (the collector's next round starts then).

The collector sends one after each poll round, its retries included, once the round's
events are flushed (`balancer.collector.service.Collector.run`). The stream moves its
event-time watermark to `until_ms` when it reads one, so the window holding the round closes
in the next batch instead of waiting for the watermark's lateness
(docs/pipeline.md#when-a-window-closes).
Only one collector may write markers to a stats topic: a marker speaks for every cluster.

Wire format (docs/events.md#round-marker): `{"round_complete":{"until_ms":N}}`, keyed
`MARKER_KEY`. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Final

from balancer.core.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    Rejection,
    RejectReason,
)

MARKER_KEY: Final = b"__round_complete__"
_FIELD: Final = "round_complete"
# A message is a marker when it starts so (the collector writes it compactly); anything
# else is an event or an envelope.
_PREFIX: Final = b'{"round_complete"'


def encode_round_marker(until_ms: int) -> bytes:
    """The marker message promising no event before `until_ms`."""
    return json.dumps({_FIELD: {"until_ms": int(until_ms)}}, separators=(",", ":")).encode()


def is_round_marker(raw: bytes) -> bool:
    """Whether a message claims to be a marker (`parse_round_marker` judges it)."""
    return raw.startswith(_PREFIX)


def parse_round_marker(
    raw: bytes, *, now_ms: int | None = None, max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_MS
) -> int | Rejection:
    """The marker's `until_ms`, or why it is rejected (never raises).

    As for an event's timestamp: within the valid range, and no further ahead of the
    reader's clock `now_ms` than `max_future_skew_ms` (a marker far ahead would make every
    on-time event late).
    """
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Rejection(RejectReason.BAD_JSON, f"round marker is not valid JSON: {str(exc)[:120]}")
    body = obj.get(_FIELD) if isinstance(obj, dict) and len(obj) == 1 else None
    if not isinstance(body, dict) or set(body) != {"until_ms"}:
        return Rejection(
            RejectReason.WRONG_TYPE, 'a round marker is {"round_complete":{"until_ms":N}}'
        )
    until_ms = body["until_ms"]
    if isinstance(until_ms, bool) or not isinstance(until_ms, int):
        return Rejection(RejectReason.WRONG_TYPE, "round marker until_ms must be an integer")
    if not MIN_TIMESTAMP_MS <= until_ms < MAX_TIMESTAMP_MS:
        return Rejection(
            RejectReason.TIMESTAMP_OUT_OF_RANGE, f"round marker until_ms {until_ms} out of range"
        )
    if now_ms is not None and until_ms > now_ms + max_future_skew_ms:
        return Rejection(
            RejectReason.TIMESTAMP_IN_FUTURE,
            f"round marker until_ms {until_ms} is more than {max_future_skew_ms} ms ahead",
        )
    return until_ms
