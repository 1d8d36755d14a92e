"""Drain marks: which brokers an operator (or a broker's preStop hook) asked us to empty.

A mark is one record per broker, keyed `cluster/broker` (`broker` is the id `host:port` that
`GET /admin/v2/brokers/{cluster}` lists); the latest record of a key is the mark's state:

- `draining`: set by `pulsar-balancer drain`; the broker gets no new bundle and is emptied.
- `gone`: the lease holder saw the marked broker unlisted (stopped, restarting, scaled in).
- `cleared`: unmarked by `drain --undo`, or by the restart rule: a broker seen `gone` that
  is listed again has restarted, and is filled as any restarted broker is.

Pure: records are decoded and encoded here, every time is passed in (`at_ms`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, TypedDict, cast

MarkState = Literal["draining", "gone", "cleared"]
MARK_STATES: tuple[MarkState, ...] = ("draining", "gone", "cleared")
# Who the restart rule writes as, in a mark's `by`.
RESTART_RULE_BY = "pulsar-balancer (restart rule)"
# The longest `by` kept: a pod name or user plus a host fits; a huge one is cut, not refused.
MAX_BY_CHARS = 200


class BadMarkError(ValueError):
    """A record of the marks topic that is not a mark (counted and skipped by the reader)."""


class MarkRecord(TypedDict):
    """A mark's JSON value on the marks topic."""

    cluster: str
    broker: str
    state: MarkState
    by: str  # who made this change (user, pod, or the restart rule)
    at_ms: int  # when (epoch ms)
    marked_by: str  # who set the draining mark this record follows from
    marked_at_ms: int


@dataclass(frozen=True, slots=True)
class DrainMark:
    cluster: str
    broker: str  # host:port, as the cluster lists it
    state: MarkState
    by: str
    at_ms: int
    marked_by: str
    marked_at_ms: int

    @property
    def key(self) -> str:
        return mark_key(self.cluster, self.broker)

    @property
    def draining(self) -> bool:
        """Not cleared: the broker gets no new bundle (a gone broker gets none either)."""
        return self.state != "cleared"

    def as_record(self) -> MarkRecord:
        return MarkRecord(
            cluster=self.cluster,
            broker=self.broker,
            state=self.state,
            by=self.by,
            at_ms=self.at_ms,
            marked_by=self.marked_by,
            marked_at_ms=self.marked_at_ms,
        )

    def encode(self) -> tuple[bytes, bytes]:
        """The record's key and value."""
        return self.key.encode(), json.dumps(self.as_record(), sort_keys=True).encode()


def mark_key(cluster: str, broker: str) -> str:
    return f"{cluster}/{broker}"


def _check_broker(broker: str) -> str:
    host, sep, port = broker.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in broker or broker != broker.strip():
        raise BadMarkError(f"broker {broker!r} is not a broker id host:port")
    return broker


def new_mark(cluster: str, broker: str, *, by: str, at_ms: int) -> DrainMark:
    """A draining mark set now by `by`."""
    if not cluster or "/" in cluster:
        raise BadMarkError(f"cluster {cluster!r} is not a cluster name")
    by = by[:MAX_BY_CHARS] or "unknown"
    return DrainMark(cluster, _check_broker(broker), "draining", by, at_ms, by, at_ms)


def changed(mark: DrainMark, state: MarkState, *, by: str, at_ms: int) -> DrainMark:
    """The mark moved to `state` by `by` at `at_ms` (who set it first is kept)."""
    return replace(mark, state=state, by=by[:MAX_BY_CHARS] or "unknown", at_ms=at_ms)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadMarkError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _ms(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadMarkError(f"{name} must be a non-negative integer (epoch ms), got {value!r}")
    return value


def decode_mark(key: bytes | None, value: bytes | None) -> DrainMark:
    """A record of the marks topic as a mark; BadMarkError says what is wrong with it."""
    if key is None:
        raise BadMarkError("record without a key")
    if value is None:
        raise BadMarkError("record without a value (a tombstone: marks are cleared, not deleted)")
    try:
        body = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadMarkError(f"value is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadMarkError("value is not a JSON object")
    state = body.get("state")
    if state not in MARK_STATES:
        raise BadMarkError(f"state must be one of {', '.join(MARK_STATES)}, got {state!r}")
    mark = DrainMark(
        cluster=_text(body.get("cluster"), "cluster"),
        broker=_check_broker(_text(body.get("broker"), "broker")),
        state=cast(MarkState, state),
        by=_text(body.get("by"), "by")[:MAX_BY_CHARS],
        at_ms=_ms(body.get("at_ms"), "at_ms"),
        marked_by=_text(body.get("marked_by"), "marked_by")[:MAX_BY_CHARS],
        marked_at_ms=_ms(body.get("marked_at_ms"), "marked_at_ms"),
    )
    try:
        text_key = key.decode()
    except UnicodeDecodeError:
        raise BadMarkError("key is not UTF-8") from None
    if text_key != mark.key:
        raise BadMarkError(f"key {text_key!r} does not name the value's {mark.key!r}")
    return mark


def draining_brokers(marks: Iterable[DrainMark], cluster: str) -> frozenset[str]:
    """The brokers of `cluster` marked and not cleared."""
    return frozenset(m.broker for m in marks if m.cluster == cluster and m.draining)


def restart_rule(
    marks: Iterable[DrainMark], cluster: str, listed: Iterable[str], *, at_ms: int
) -> tuple[DrainMark, ...]:
    """The changes the restart rule makes to `cluster`'s marks, given the brokers it lists now.

    A draining broker no longer listed is `gone` (it stopped: restarted or scaled in); a gone
    broker listed again restarted and is back, so its mark is `cleared` and it is filled as a
    restarted broker is. An empty listing changes nothing: a cluster lists at least the
    broker that answered, so an empty one is a bad answer, not every broker gone.
    """
    listed_now = frozenset(listed)
    if not listed_now:
        return ()
    out: list[DrainMark] = []
    for mark in marks:
        if mark.cluster != cluster:
            continue
        if mark.state == "draining" and mark.broker not in listed_now:
            out.append(changed(mark, "gone", by=RESTART_RULE_BY, at_ms=at_ms))
        elif mark.state == "gone" and mark.broker in listed_now:
            out.append(changed(mark, "cleared", by=RESTART_RULE_BY, at_ms=at_ms))
    return tuple(sorted(out, key=lambda m: m.key))


def latest(marks: Mapping[str, DrainMark], mark: DrainMark) -> dict[str, DrainMark]:
    """`marks` (key -> mark) with `mark` as its key's latest state (a compacted topic's view)."""
    return {**marks, mark.key: mark}
