"""Decisions as values: what the detector wants done, why, and on what evidence.

A decision id is stable: the same cluster, target and window always give the same id, so
a replayed batch or a restarted process recognises a decision it has already handled.

Purely computational, with no side effects.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from balancer.core.bundles import BundleRange, format_position
from balancer.core.limits import BundleLimits, Limit
from balancer.core.split import ChildLoad, SplitAlgorithm


class SplitReason(StrEnum):
    """Why a bundle is split, spelt as Pulsar's `pulsar_lb_bundles_split_breakdown_total{reason}`.

    Declared in Pulsar's priority order (Topics > Sessions > MsgRate > Bandwidth).
    """

    TOPICS = "Topics"
    SESSIONS = "Sessions"
    MSG_RATE = "MsgRate"
    BANDWIDTH = "Bandwidth"
    ADMIN = "Admin"
    UNKNOWN = "Unknown"


REASON_PRIORITY: tuple[SplitReason, ...] = tuple(SplitReason)

# The split reason a bundle over each limit is given (same priority order as `Limit`).
REASON_FOR_LIMIT: dict[Limit, SplitReason] = {
    Limit.TOPICS: SplitReason.TOPICS,
    Limit.SESSIONS: SplitReason.SESSIONS,
    Limit.MSG_RATE: SplitReason.MSG_RATE,
    Limit.BANDWIDTH: SplitReason.BANDWIDTH,
}


class DecisionKind(StrEnum):
    SPLIT = "split"
    OFFLOAD = "offload"
    MOVE = "move"  # a bundle unloaded to a chosen broker (balancer.core.moves.MoveDecision)


class SkipReason(StrEnum):
    """Why an over-threshold bundle got no split decision this window (bounded: a metric label)."""

    INCOMPLETE = "incomplete"  # window completeness under the configured minimum
    HYSTERESIS = "hysteresis"  # not yet over threshold in enough consecutive windows
    TOO_FEW_TOPICS = "too_few_topics"  # Pulsar never splits a bundle with < 2 topics
    UNSPLITTABLE = "unsplittable"  # upper - lower <= 1
    MAX_BUNDLES = "max_bundles"  # the namespace already has its maximum number of bundles
    CYCLE_CAP = "cycle_cap"  # the per-cycle cap on splits is reached; retried next window
    COOLDOWN = "cooldown"  # the namespace was split recently
    NO_BOUNDARY = "no_boundary"  # the algorithm found no valid boundary
    ALGORITHM_ERROR = "algorithm_error"  # the algorithm gave boundaries Pulsar would reject
    SPLIT_DISABLED = "split_disabled"  # the namespace policy turns splitting off


def stable_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join((prefix, *parts)).encode("utf-8")).hexdigest()
    return f"{prefix}-{digest[:24]}"


def split_decision_id(
    *, cluster: str, namespace: str, bundle: BundleRange, window_end_ms: int
) -> str:
    return stable_id("split", cluster, namespace, str(bundle), str(window_end_ms))


def offload_decision_id(*, cluster: str, topic: str, window_end_ms: int) -> str:
    return stable_id("offload", cluster, topic, str(window_end_ms))


@dataclass(frozen=True, slots=True)
class SplitInputs:
    """The evidence behind a split decision (what the audit log records)."""

    msg_rate: float  # msg/s, in + out
    throughput_bytes: float  # bytes/s, in + out
    topic_count: int
    session_count: int
    completeness: float
    hit_count: int
    limits: BundleLimits
    bundles_in_namespace: int
    max_bundles: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "msg_rate": self.msg_rate,
            "throughput_bytes": self.throughput_bytes,
            "topic_count": self.topic_count,
            "session_count": self.session_count,
            "completeness": self.completeness,
            "hit_count": self.hit_count,
            "limits": {
                "max_topics": self.limits.max_topics,
                "max_sessions": self.limits.max_sessions,
                "max_msg_rate": self.limits.max_msg_rate,
                "max_bandwidth_mbytes": self.limits.max_bandwidth_mbytes,
            },
            "bundles_in_namespace": self.bundles_in_namespace,
            "max_bundles": self.max_bundles,
        }


@dataclass(frozen=True, slots=True)
class SplitDecision:
    decision_id: str
    cluster: str
    namespace: str  # tenant/ns
    bundle: BundleRange
    algorithm: SplitAlgorithm  # the algorithm that chose the boundaries
    boundaries: tuple[int, ...]  # strictly inside the bundle, sorted
    children: tuple[ChildLoad, ...]  # expected children with their loads
    reasons: tuple[SplitReason, ...]  # in Pulsar's priority order, never empty
    window_end_ms: int
    inputs: SplitInputs
    # Unload the children after the split (Pulsar then places them)? None: the controller's
    # `unload_after_split`. False when the same window's move plan places them itself: the
    # plan counts the children on their parent's broker and gives some a destination.
    unload_children: bool | None = None

    @property
    def kind(self) -> DecisionKind:
        return DecisionKind.SPLIT

    @property
    def reason(self) -> SplitReason:
        """The first reason in priority order (Pulsar's breakdown label)."""
        return self.reasons[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "kind": self.kind.value,
            "cluster": self.cluster,
            "namespace": self.namespace,
            "bundle": str(self.bundle),
            "algorithm": self.algorithm.value,
            "boundaries": [format_position(b) for b in self.boundaries],
            "children": [
                {
                    "bundle": str(c.bundle),
                    "msg_rate": c.msg_rate,
                    "throughput_bytes": c.throughput_bytes,
                    "sessions": c.sessions,
                    "topics": c.topics,
                }
                for c in self.children
            ],
            "reasons": [r.value for r in self.reasons],
            "window_end_ms": self.window_end_ms,
            "inputs": self.inputs.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class OffloadDecision:
    """Offload a topic (one partition of a partitioned topic) down to its namespace threshold."""

    decision_id: str
    cluster: str
    namespace: str
    topic: str  # full name; a partition is its own topic
    storage_size_bytes: int
    offloaded_size_bytes: int
    threshold_bytes: int
    window_end_ms: int

    @property
    def kind(self) -> DecisionKind:
        return DecisionKind.OFFLOAD

    @property
    def bookkeeper_bytes(self) -> int:
        """Bytes still in BookKeeper: what the threshold is compared with."""
        return max(0, self.storage_size_bytes - self.offloaded_size_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "kind": self.kind.value,
            "cluster": self.cluster,
            "namespace": self.namespace,
            "topic": self.topic,
            "storage_size_bytes": self.storage_size_bytes,
            "offloaded_size_bytes": self.offloaded_size_bytes,
            "threshold_bytes": self.threshold_bytes,
            "window_end_ms": self.window_end_ms,
        }


Decision = SplitDecision | OffloadDecision


@dataclass(frozen=True, slots=True)
class Skipped:
    """An over-threshold bundle (or candidate) that got no decision, and why."""

    cluster: str
    namespace: str
    bundle: BundleRange
    reason: SkipReason
    split_reasons: tuple[SplitReason, ...]
