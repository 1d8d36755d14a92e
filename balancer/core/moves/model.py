"""What the move decision works on and what it gives: brokers, bundles, placement rules,
settings, and moves (bundle -> destination broker).

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from balancer.core.broker_load import BrokerCapacity, LoadWeights
from balancer.core.bundles import BundleRange
from balancer.core.decisions import stable_id


@dataclass(frozen=True, slots=True)
class BrokerState:
    """A broker as the decision sees it."""

    broker: str  # broker id `host:port`
    load_ratio: float  # the window's load (balancer.core.broker_load.BrokerLoad.load_ratio)
    # What a bundle's msg rate and throughput cost this broker, in load ratio: a bundle's
    # load on this broker is max(msg_rate / max_msg_rate, throughput / max_throughput_bytes).
    # From the load report: bandwidth limits, and cpu per msg/s; else the configured capacity.
    capacity: BrokerCapacity
    topic_count: int = 0
    active: bool = True  # listed by `GET /admin/v2/brokers/{cluster}` (Pulsar 409s others)
    failure_domain: str | None = None
    # The part of the load no bundle move changes (memory, direct memory: the JVM's heap,
    # weighted); the rest follows traffic. load_ratio = max(floor_ratio, traffic).
    floor_ratio: float = 0.0
    traffic_ratio: float | None = None  # None: all of load_ratio follows traffic
    # The traffic's resources apart (weighted, from the load report): a bundle's msg rate
    # costs cpu and its throughput bandwidth, and the load is the larger, so a msg-heavy
    # bundle added to a bandwidth-bound broker raises its load by less than its own load.
    # None (either): the traffic is one number and a bundle adds its load to it.
    cpu_ratio: float | None = None
    bandwidth_ratio: float | None = None

    @property
    def traffic(self) -> float:
        return self.load_ratio if self.traffic_ratio is None else self.traffic_ratio

    @property
    def host(self) -> str:
        """The host part of the id: isolation policies match brokers by host."""
        return self.broker.rsplit(":", 1)[0]


@dataclass(frozen=True, slots=True)
class BundleState:
    """A bundle, its owner and its windowed load."""

    namespace: str  # tenant/ns
    bundle: BundleRange
    owner: str  # broker id
    msg_rate: float = 0.0  # msg/s, in + out
    throughput_bytes: float = 0.0  # bytes/s, in + out
    sessions: int = 0  # producers + consumers: the clients a move reconnects
    topics: int = 0
    last_moved_ms: int | None = None  # the last move this balancer applied (grace period)
    # Counted (its broker's load, its anti-affinity group, its topics) but never moved: a
    # namespace outside the controller's allow-list, or a system namespace.
    pinned: bool = False
    # Moves of this bundle since the cluster's last roll started, while they still count
    # (`balancer.core.rollout.MAX_MOVES_IN_ROLL`): at that many, balance moves leave it.
    moves_in_roll: int = 0

    @property
    def name(self) -> str:
        """`tenant/ns/0x..._0x...`, as ownedNamespaces and the load report name it."""
        return f"{self.namespace}/{self.bundle}"


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    """Pulsar's `NamespaceIsolationData`: namespaces (regexes) that go to primary brokers
    (regexes over hosts), or to secondary ones when too few primaries are up."""

    name: str
    namespaces: tuple[str, ...]
    primary: tuple[str, ...]
    secondary: tuple[str, ...] = ()
    # auto_failover_policy min_limit: secondaries are added while FEWER primaries than this
    # are up (MinAvailablePolicy.shouldFailoverToSecondary); 0: never.
    min_primary_brokers: int = 1


@dataclass(frozen=True, slots=True)
class PlacementRules:
    """The rules a mover checks itself (Pulsar's admin unload path may not)."""

    isolation: tuple[IsolationPolicy, ...] = ()
    anti_affinity: Mapping[str, str] = field(default_factory=dict)  # namespace -> group
    max_topics_per_broker: int = 50_000  # loadBalancerBrokerMaxTopics
    # ServiceConfiguration.failureDomainsEnabled (default false): only then are a group's
    # namespaces spread over failure domains first (LoadManagerShared).
    failure_domains_enabled: bool = False


@dataclass(frozen=True, slots=True)
class MoveSettings:
    """Targets and limits of the move decision."""

    # Balanced: every broker at most `mean + margin` and at most `overload_ratio`, and none
    # under `mean - margin` while another is over the mean (no idle broker beside busy ones).
    margin: float = 0.10
    overload_ratio: float = 0.85  # OverloadShedder's 85 %
    grace_period_s: float = 1800.0  # a bundle is not moved again within this (no ping-pong)
    max_moves_per_cluster: int = 40  # per decision cycle
    max_moves_per_broker: int = 15  # out of or into one broker, per decision cycle
    min_bundle_load_ratio: float = 0.01  # a bundle moving less than this is not worth a move
    weights: LoadWeights = field(default_factory=LoadWeights)


class MoveReason(StrEnum):
    OVERLOADED = "overloaded"  # the source is over `overload_ratio`
    ABOVE_MEAN = "above_mean"  # the source is over `mean + margin`
    IDLE_BROKER = "idle_broker"  # the destination is under `mean - margin`
    SPLIT_CHILD = "split_child"  # a child of a split decided in the same cycle
    # Not the decision's: the controller's follow-up after a refused unload left the modular
    # load manager's destination behind for a bare range: a bundle with that range is
    # unloaded to the broker that owns it, so its own lookup uses the entry up in place.
    CLEAR_LEFTOVER = "clear_leftover"
    DRAIN = "drain"  # the source is marked draining: every bundle it owns is to leave it


class BlockReason(StrEnum):
    """Why a broker over its target got no move (bounded: a metric label)."""

    NO_DESTINATION = "no_destination"  # no broker with room the placement rules allow
    GRACE_PERIOD = "grace_period"  # its movable bundles were moved recently
    BUDGET = "budget"  # the cycle's move budget is used up
    TOO_SMALL = "too_small"  # its bundles are under `min_bundle_load_ratio`
    SINGLE_BUNDLE = "single_bundle"  # one bundle carries the load: a split, not a move
    # Its bundles' ranges have a move in flight in the cluster (or one this cycle): the
    # modular load manager keeps one destination per bare range, so a second move of the
    # range would overwrite the first's.
    RANGE_IN_FLIGHT = "range_in_flight"


def move_decision_id(
    *, cluster: str, namespace: str, bundle: BundleRange, window_end_ms: int
) -> str:
    return stable_id("move", cluster, namespace, str(bundle), str(window_end_ms))


@dataclass(frozen=True, slots=True)
class MoveDecision:
    """Unload `bundle` from `source` to `destination` (`unload?destinationBroker=`)."""

    decision_id: str
    cluster: str
    namespace: str
    bundle: BundleRange
    source: str
    destination: str
    reason: MoveReason
    bundle_load_ratio: float  # the bundle's load on the source
    msg_rate: float
    throughput_bytes: float
    sessions: int
    source_load_before: float
    source_load_after: float
    destination_load_before: float
    destination_load_after: float
    window_end_ms: int
    after_split: str | None = None  # decision id of the split whose child this is

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "kind": "move",
            "cluster": self.cluster,
            "namespace": self.namespace,
            "bundle": str(self.bundle),
            "source": self.source,
            "destination": self.destination,
            "reason": self.reason.value,
            "bundle_load_ratio": self.bundle_load_ratio,
            "msg_rate": self.msg_rate,
            "throughput_bytes": self.throughput_bytes,
            "sessions": self.sessions,
            "source_load_before": self.source_load_before,
            "source_load_after": self.source_load_after,
            "destination_load_before": self.destination_load_before,
            "destination_load_after": self.destination_load_after,
            "window_end_ms": self.window_end_ms,
            "after_split": self.after_split,
        }


class DrainBlock(StrEnum):
    """Why a bundle of a draining broker gets no move (bounded: a metric label)."""

    NO_DESTINATION = "no_destination"  # the placement rules allow no broker that stays
    NO_ROOM = "no_room"  # every allowed broker would end over its target
    NOT_MOVABLE = "not_movable"  # outside the controller's allow-list (pinned)
    # Another move of its bare range is in flight (or one this cycle): moved next cycle.
    RANGE_IN_FLIGHT = "range_in_flight"


@dataclass(frozen=True, slots=True)
class BlockedBundle:
    """A bundle of a draining broker that cannot leave it this cycle, and why."""

    bundle: str  # tenant/ns/range
    broker: str  # its owner (draining)
    reason: DrainBlock


@dataclass(frozen=True, slots=True)
class BlockedBroker:
    broker: str
    load_ratio: float
    reason: BlockReason


@dataclass(frozen=True, slots=True)
class MovePlan:
    """One cluster's moves for one window, with the loads before and after them."""

    cluster: str
    window_end_ms: int
    moves: tuple[MoveDecision, ...]
    loads_before: Mapping[str, float]  # broker -> load ratio
    loads_after: Mapping[str, float]  # broker -> projected load ratio after the moves
    blocked: tuple[BlockedBroker, ...] = ()  # brokers still over target, and why
    balanced_before: bool = False
    balanced_after: bool = False
    draining: tuple[str, ...] = ()  # brokers marked draining, sorted (never a destination)
    drain_blocked: tuple[BlockedBundle, ...] = ()  # their bundles that cannot leave, and why
    # Drained bundles placed outside the preferred destinations of a roll (no room there):
    # (bundle, destination); each will move once more when that broker restarts.
    drain_fallback: tuple[tuple[str, str], ...] = ()
