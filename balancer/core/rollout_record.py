"""The rollout record: one per cluster on the drain marks' compacted topic, keyed
`cluster/@rollout` (no broker id has no port, so it never collides with a mark's key).

`pulsar-balancer roll start` writes it BEFORE it pauses Pulsar's shedder and auto-split, with
the values they had (`paused`) and which of them no dynamic override set (`unset`: they came
from broker.conf): whoever finishes the roll (`roll finish`, in this process or any later
one, after a crash too) restores exactly those, deleting the pause's override of an unset
one. While its state is `rolling`, the balancer sends each drain's bundles by the restart
order (`balancer.core.rollout`).

Pure: records are decoded and encoded here, every time is passed in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, NotRequired, TypedDict, cast

from balancer.core.drain_marks import (
    MAX_BY_CHARS,
    RESTART_RULE_BY,
    BadMarkError,
    DrainMark,
    _check_broker,
)

RolloutState = Literal["rolling", "finished"]
ROLLOUT_STATES: tuple[RolloutState, ...] = ("rolling", "finished")
ROLLOUT_KEY_SUFFIX = "/@rollout"


class RolloutRecord(TypedDict):
    """A rollout's JSON value on the marks topic."""

    kind: Literal["rollout"]
    cluster: str
    state: RolloutState
    order: list[str]  # broker ids, the first to restart first
    paused: dict[str, str]  # dynamic configuration name -> the value to restore
    # Of `paused`, those no override set at the start (broker.conf's): restored by deleting
    # the override. Absent in records written before 2026-11-29: restored by value.
    unset: NotRequired[list[str]]
    started_by: str
    started_at_ms: int
    by: str  # who made the last change
    at_ms: int


@dataclass(frozen=True, slots=True)
class Rollout:
    cluster: str
    state: RolloutState
    order: tuple[str, ...]
    paused: Mapping[str, str] = field(default_factory=dict)
    started_by: str = "unknown"
    started_at_ms: int = 0
    by: str = "unknown"
    at_ms: int = 0
    unset: tuple[str, ...] = ()  # of `paused`: no override at the start (see RolloutRecord)

    @property
    def key(self) -> str:
        return rollout_key(self.cluster)

    @property
    def rolling(self) -> bool:
        return self.state == "rolling"

    def as_record(self) -> RolloutRecord:
        return RolloutRecord(
            kind="rollout",
            cluster=self.cluster,
            state=self.state,
            order=list(self.order),
            paused=dict(self.paused),
            unset=list(self.unset),
            started_by=self.started_by,
            started_at_ms=self.started_at_ms,
            by=self.by,
            at_ms=self.at_ms,
        )

    def encode(self) -> tuple[bytes, bytes]:
        return self.key.encode(), json.dumps(self.as_record(), sort_keys=True).encode()


def rollout_key(cluster: str) -> str:
    return f"{cluster}{ROLLOUT_KEY_SUFFIX}"


def is_rollout_key(key: bytes | None) -> bool:
    return key is not None and key.endswith(ROLLOUT_KEY_SUFFIX.encode())


def new_rollout(
    cluster: str,
    order: tuple[str, ...],
    paused: Mapping[str, str],
    *,
    by: str,
    at_ms: int,
    unset: Iterable[str] = (),
) -> Rollout:
    """A rollout started now by `by`; `paused`: the values to restore at its finish, `unset`:
    those of them that no dynamic override set (restored by deleting the override)."""
    if not cluster or "/" in cluster:
        raise BadMarkError(f"cluster {cluster!r} is not a cluster name")
    by = by[:MAX_BY_CHARS] or "unknown"
    order = tuple(_check_broker(b) for b in order)
    unset_names = tuple(sorted(set(unset)))
    if not set(unset_names) <= set(paused):
        raise BadMarkError(f"unset names {unset_names} not all among the paused {sorted(paused)}")
    return Rollout(cluster, "rolling", order, dict(paused), by, at_ms, by, at_ms, unset_names)


def finished(rollout: Rollout, *, by: str, at_ms: int) -> Rollout:
    return replace(rollout, state="finished", by=by[:MAX_BY_CHARS] or "unknown", at_ms=at_ms)


def _back_since_start(rollout: Rollout, marks: Iterable[DrainMark]) -> set[str]:
    """Brokers whose mark the restart rule cleared after the roll started (seen back)."""
    return {
        m.broker
        for m in marks
        if m.cluster == rollout.cluster
        and m.state == "cleared"
        and m.by == RESTART_RULE_BY
        and m.at_ms >= rollout.started_at_ms
    }


def roll_complete(rollout: Rollout, marks: Iterable[DrainMark]) -> bool:
    """Every broker of the order drained and seen back since the roll started: its mark was
    cleared by the restart rule after `started_at_ms`. The balancer then finishes the roll
    itself (restores the switches) if the operator has not: they are never left off."""
    if not rollout.rolling or not rollout.order:
        return False
    back = _back_since_start(rollout, marks)
    return all(b in back for b in rollout.order)


@dataclass(frozen=True, slots=True)
class RollProgress:
    """How far a roll in progress is (the live view's line)."""

    order: tuple[str, ...]
    restarted: tuple[str, ...]  # brokers of the order seen back since the roll started

    @property
    def total(self) -> int:
        return len(self.order)

    @property
    def next(self) -> str | None:
        """The first broker of the order not seen back yet (None: every one is)."""
        return next((b for b in self.order if b not in self.restarted), None)


def roll_progress(rollout: Rollout, marks: Iterable[DrainMark]) -> RollProgress:
    """The brokers of the order seen back since the roll started (as `roll_complete`
    counts them), in the order."""
    back = _back_since_start(rollout, marks)
    return RollProgress(rollout.order, tuple(b for b in rollout.order if b in back))


def roll_moves_count_since(
    rollout: Rollout | None, *, now_ms: int, grace_period_s: float
) -> int | None:
    """Since when each bundle's moves count against `MAX_MOVES_IN_ROLL` (the roll's start),
    or None: no roll, or one finished more than twice the grace period ago (the final
    balance, which waits for the last drains' grace period, is over by then)."""
    if rollout is None:
        return None
    if rollout.rolling or now_ms - rollout.at_ms <= 2 * grace_period_s * 1000:
        return rollout.started_at_ms
    return None


def decode_rollout(key: bytes | None, value: bytes | None) -> Rollout:
    """A `cluster/@rollout` record; BadMarkError says what is wrong with it."""
    if value is None:
        raise BadMarkError("rollout record without a value")
    try:
        body = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadMarkError(f"rollout value is not JSON ({exc})") from None
    if not isinstance(body, dict) or body.get("kind") != "rollout":
        raise BadMarkError("rollout value is not a JSON object of kind 'rollout'")
    state = body.get("state")
    if state not in ROLLOUT_STATES:
        raise BadMarkError(f"state must be one of {', '.join(ROLLOUT_STATES)}, got {state!r}")
    order, paused = body.get("order"), body.get("paused")
    if not isinstance(order, list) or not all(isinstance(b, str) for b in order):
        raise BadMarkError("order must be a list of broker ids")
    if not isinstance(paused, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in paused.items()
    ):
        raise BadMarkError("paused must map configuration names to non-empty strings")
    unset = body.get("unset", [])
    if not isinstance(unset, list) or not all(isinstance(n, str) and n in paused for n in unset):
        raise BadMarkError("unset must list names among the paused ones")
    texts = {}
    for name in ("cluster", "started_by", "by"):
        value_of = body.get(name)
        if not isinstance(value_of, str) or not value_of:
            raise BadMarkError(f"{name} must be a non-empty string, got {value_of!r}")
        texts[name] = value_of
    times = {}
    for name in ("started_at_ms", "at_ms"):
        ms = body.get(name)
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise BadMarkError(f"{name} must be a non-negative integer (epoch ms), got {ms!r}")
        times[name] = ms
    rollout = Rollout(
        cluster=texts["cluster"],
        state=cast(RolloutState, state),
        order=tuple(_check_broker(b) for b in order),
        paused=dict(paused),
        started_by=texts["started_by"][:MAX_BY_CHARS],
        started_at_ms=times["started_at_ms"],
        by=texts["by"][:MAX_BY_CHARS],
        at_ms=times["at_ms"],
        unset=tuple(sorted(set(unset))),
    )
    if key is None or key.decode(errors="replace") != rollout.key:
        raise BadMarkError(f"key {key!r} does not name the value's {rollout.key!r}")
    return rollout
