"""A move applied to the decision's running state, as the decision it gives.

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Mapping

from balancer.core.moves.drain import DrainMove
from balancer.core.moves.model import MoveDecision, MoveReason, MoveSettings, move_decision_id

EPSILON = 1e-9  # as decide.EPSILON: a load within this of a bound is at the bound


def reason_of(
    move: DrainMove, reason: MoveReason, after_split: Mapping[str, str], settings: MoveSettings
) -> MoveReason:
    """A split's child, or a move off an overloaded broker, says so; else `reason`."""
    if move.bundle.name in after_split:
        return MoveReason.SPLIT_CHILD
    if move.source_before > settings.overload_ratio + EPSILON:
        return MoveReason.OVERLOADED
    return reason


def decision_of(
    cluster: str, window_end_ms: int, move: DrainMove, reason: MoveReason, after_split: str | None
) -> MoveDecision:
    bundle = move.bundle
    return MoveDecision(
        decision_id=move_decision_id(
            cluster=cluster,
            namespace=bundle.namespace,
            bundle=bundle.bundle,
            window_end_ms=window_end_ms,
        ),
        cluster=cluster,
        namespace=bundle.namespace,
        bundle=bundle.bundle,
        source=move.source,
        destination=move.destination,
        reason=reason,
        bundle_load_ratio=move.on_source,
        msg_rate=bundle.msg_rate,
        throughput_bytes=bundle.throughput_bytes,
        sessions=bundle.sessions,
        source_load_before=move.source_before,
        source_load_after=move.source_after,
        destination_load_before=move.destination_before,
        destination_load_after=move.destination_after,
        window_end_ms=window_end_ms,
        after_split=after_split,
    )
