"""Draining brokers: every bundle a draining broker owns is to leave it, to brokers that stay.

A broker marked draining (`plan --drain`, or the drain marks the controller reads) is about
to stop or be removed. The decision then treats it as already gone:

- it is never a destination (the cycle sees it inactive, as Pulsar's admin API sees a broker
  that is not listed);
- the target every other broker is held to is computed over the brokers that stay, with the
  load the draining brokers carry added to theirs (it will land on them): min(mean' +
  margin, overload_ratio), mean' = (staying loads + draining bundles' loads) / staying;
- each of its bundles, largest first (the big ones placed while there is most room), goes
  to the least loaded broker the placement rules allow (isolation policies with their
  failover to secondaries, anti-affinity spread over failure domains then brokers, the
  topic limit) that stays within that target after the move. A drain is not held by the
  grace period nor by `min_bundle_load_ratio`, nor by the cycle's move budgets: the broker
  is going away, and the controller paces drain moves itself (moves in flight per draining
  broker, drain moves per minute).

With destination tiers (`balancer.core.rollout.drain_destinations`, a rolling restart), a
bundle goes to the least loaded broker with room of the FIRST tier that has one, the same
rules and target applied; brokers in no tier come last. A bundle placed outside the first
tier is named (`drain_fallback`): it will move once more when that broker restarts.

System namespaces (each broker's heartbeat and SLA-monitor namespaces) stay: a broker owns
its own, and Pulsar places them itself. A bundle that cannot leave is named with a
`DrainBlock` reason.

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import fsum
from typing import TYPE_CHECKING

from balancer.core.moves.model import BlockedBundle, BundleState, DrainBlock
from balancer.core.moves.placement import (
    anti_affinity_allowed,
    is_system_namespace,
    isolation_allowed,
)

if TYPE_CHECKING:  # decide.py calls this module with its running state
    from balancer.core.moves.decide import _Cycle

EPSILON = 1e-9  # as decide.EPSILON: a load within this of a bound is at the bound


@dataclass(frozen=True, slots=True)
class DrainPace:
    """How many drain moves may start this cycle: per draining broker (its limit of moves in
    flight less those in flight now) and in the cluster (its per-minute limit less those of
    the last minute). A bundle over the pace stays where it is, still counted as landing on
    the staying brokers (their target keeps room for it); it is neither moved nor blocked."""

    per_broker: Mapping[str, int]  # draining broker -> moves it may start (absent: none)
    cluster: int


@dataclass(frozen=True, slots=True)
class DrainMove:
    """One bundle off a draining broker, with the loads before and after (projected)."""

    bundle: BundleState
    source: str
    destination: str
    on_source: float  # the bundle's load on the source
    source_before: float
    destination_before: float
    source_after: float
    destination_after: float


def to_drain(cycle: _Cycle, draining: frozenset[str]) -> list[BundleState]:
    """The bundles of the draining brokers that are to leave (system namespaces stay),
    largest first, ties by name."""
    out = [
        b
        for name, b in cycle.bundles.items()
        if cycle.owner[name] in draining and not is_system_namespace(b.namespace)
    ]
    return sorted(out, key=lambda b: (-cycle.load_on(b, cycle.owner[b.name]), b.name))


def drain_target(cycle: _Cycle, bundles: list[BundleState]) -> float:
    """The most a staying broker may carry once the draining brokers' movable bundles have
    landed: min(mean' + margin, overload_ratio) over the staying (active) brokers."""
    staying = cycle.active
    if not staying:
        return 0.0
    landing = fsum(cycle.load_on(b, cycle.owner[b.name]) for b in bundles if not b.pinned)
    mean = (fsum(cycle.loads[b] for b in staying) + landing) / len(staying)
    return min(mean + cycle.settings.margin, cycle.settings.overload_ratio)


def allowed_destinations(cycle: _Cycle, bundle: BundleState) -> frozenset[str]:
    """The staying brokers the placement rules allow for the bundle (its draining owner is
    no candidate: it is going away)."""
    allowed = isolation_allowed(bundle.namespace, list(cycle.brokers.values()), cycle.rules)
    counts = cycle.group_counts(bundle)
    if counts is not None and allowed:
        allowed = anti_affinity_allowed(
            allowed,
            counts,
            cycle.domains,
            domains_enabled=cycle.rules.failure_domains_enabled,
        )
    return allowed


def _best_destination(
    cycle: _Cycle, bundle: BundleState, allowed: frozenset[str], target: float
) -> tuple[float, str] | None:
    """The allowed broker least loaded after the move that stays within `target` and the
    topic limit; None when none has room."""
    limit = cycle.rules.max_topics_per_broker
    best: tuple[float, str] | None = None
    for dest in sorted(allowed):
        if cycle.topics[dest] + bundle.topics > limit:
            continue
        after = cycle.after(bundle, dest, 1.0)
        if after > target + EPSILON:
            continue
        if best is None or (after, dest) < best:
            best = (after, dest)
    return best


def _tiered(
    allowed: frozenset[str], tiers: tuple[frozenset[str], ...] | None
) -> list[frozenset[str]]:
    """`allowed` cut into the preference tiers, brokers in no tier last; empty tiers kept
    out (the first non-empty one is the preferred)."""
    if tiers is None:
        return [allowed]
    out = [allowed & t for t in tiers]
    out.append(allowed - frozenset().union(*tiers))
    return [t for t in out if t]


def plan_drain(
    cycle: _Cycle,
    draining: frozenset[str],
    pace: DrainPace | None = None,
    tiers: tuple[frozenset[str], ...] | None = None,
) -> tuple[list[DrainMove], list[BlockedBundle], list[tuple[str, str]]]:
    """Moves every bundle off the draining brokers that can go (applied to `cycle`), names
    those that cannot, and those placed outside the first destination tier (bundle,
    destination); with `pace`, no more moves than it allows (None: all, as `plan --drain`
    shows them). `cycle` must see the draining brokers inactive."""
    preferred = next((t for t in tiers or () if t), None)
    fallback: list[tuple[str, str]] = []
    bundles = to_drain(cycle, draining)
    target = drain_target(cycle, bundles)
    moves: list[DrainMove] = []
    blocked: list[BlockedBundle] = []
    started: dict[str, int] = {}
    for bundle in bundles:
        source = cycle.owner[bundle.name]
        if pace is not None and (
            len(moves) >= pace.cluster or started.get(source, 0) >= pace.per_broker.get(source, 0)
        ):
            continue  # paced: a later cycle moves it

        def block(reason: DrainBlock, bundle: BundleState = bundle, source: str = source) -> None:
            blocked.append(BlockedBundle(bundle=bundle.name, broker=source, reason=reason))

        if bundle.pinned:
            block(DrainBlock.NOT_MOVABLE)
            continue
        if str(bundle.bundle) in cycle.busy_ranges:
            block(DrainBlock.RANGE_IN_FLIGHT)
            continue
        allowed = allowed_destinations(cycle, bundle)
        if not allowed:
            block(DrainBlock.NO_DESTINATION)
            continue
        best: tuple[float, str] | None = None
        for tier in _tiered(allowed, tiers):
            best = _best_destination(cycle, bundle, tier, target)
            if best is not None:
                break
        if best is None:
            block(DrainBlock.NO_ROOM)
            continue
        dest = best[1]
        if preferred is not None and dest not in preferred:
            fallback.append((bundle.name, dest))
        on_source = cycle.load_on(bundle, source)
        before_src, before_dst = cycle.loads[source], cycle.loads[dest]
        after_src, after_dst = cycle.apply(bundle, source, dest)
        started[source] = started.get(source, 0) + 1
        moves.append(
            DrainMove(bundle, source, dest, on_source, before_src, before_dst, after_src, after_dst)
        )
    blocked.sort(key=lambda b: (b.broker, b.bundle))
    return moves, blocked, sorted(fallback)
