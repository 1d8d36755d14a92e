"""The move decision: which bundles go to which brokers so that every broker is within its
target, in the fewest moves and with the least load and sessions moved.

Load model (an approximation, documented in docs/algorithms.md): a bundle's load on broker b
is max(msg_rate / b.capacity.max_msg_rate, throughput / b.capacity.max_throughput_bytes).
Moving it subtracts its load on the source from the source's load ratio (never below 0) and
adds its load on the destination to the destination's. A broker's measured load (cpu,
bandwidth) is not exactly the sum of its bundles' loads, so the projection is linear in the
bundle's traffic and re-measured in the next window. Where the load report gives cpu and
bandwidth apart, each is projected on its own (msg rate moves cpu, throughput moves
bandwidth) and the load follows the larger: adding a msg-heavy bundle to a bandwidth-bound
broker raises it by less than the bundle's own load.

Greedy: while the cluster is not balanced, take the most loaded broker over its target and
move the bundle that best covers its excess (the smallest that brings it to target, else the
largest that fits) to the least loaded allowed broker after the move; a move must strictly
lower max(source after, destination after) below the source's load before, so the most
loaded broker never gets worse. An idle broker (under mean - margin) is filled by a small
search for the fewest moves that lift it (balancer.core.moves.fill): before the brokers over
target are relieved when it has room for all they must shed (the search counts those
moves), else after them. Ties break by name, so the plan does not depend on the input
order.

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from math import fsum

from balancer.core.broker_load import bundle_load_ratio
from balancer.core.decisions import SplitDecision
from balancer.core.moves.drain import DrainMove, DrainPace, plan_drain
from balancer.core.moves.fill import fill_moves
from balancer.core.moves.model import (
    BlockedBroker,
    BlockReason,
    BrokerState,
    BundleState,
    MoveDecision,
    MovePlan,
    MoveReason,
    MoveSettings,
    PlacementRules,
)
from balancer.core.moves.placement import (
    anti_affinity_allowed,
    is_system_namespace,
    isolation_allowed,
    same_group,
)
from balancer.core.moves.record import decision_of, reason_of
from balancer.core.rollout import MAX_MOVES_IN_ROLL

EPSILON = 1e-9  # float noise: a load within this of a bound is at the bound


def _mean(loads: Mapping[str, float]) -> float:
    return fsum(loads[b] for b in sorted(loads)) / len(loads) if loads else 0.0


def target_ratio(loads: Mapping[str, float], settings: MoveSettings) -> float:
    """The most a broker may carry: min(mean + margin, overload_ratio)."""
    return min(_mean(loads) + settings.margin, settings.overload_ratio)


def is_balanced(loads: Mapping[str, float], settings: MoveSettings) -> bool:
    """Every broker within `mean +- margin` and none over `overload_ratio` (see MoveSettings)."""
    if not loads:
        return True
    mean = _mean(loads)
    high = target_ratio(loads, settings)
    if any(v > high + EPSILON for v in loads.values()):
        return False
    idle = any(v < mean - settings.margin - EPSILON for v in loads.values())
    busy = any(v > mean + EPSILON for v in loads.values())
    return not (idle and busy)


def with_splits(
    bundles: Sequence[BundleState], splits: Sequence[SplitDecision]
) -> tuple[list[BundleState], dict[str, str]]:
    """The bundles with each split parent replaced by its children on the parent's owner, and
    child name -> split decision id. A split whose parent is not among the bundles is
    ignored (its owner is unknown)."""
    by_key = {(b.namespace, b.bundle): b for b in bundles}
    out = {(b.namespace, b.bundle): b for b in bundles}
    after_split: dict[str, str] = {}
    for split in sorted(splits, key=lambda s: s.decision_id):
        parent = by_key.get((split.namespace, split.bundle))
        if parent is None or not split.children:
            continue
        del out[(parent.namespace, parent.bundle)]
        for child in split.children:
            state = BundleState(
                namespace=parent.namespace,
                bundle=child.bundle,
                owner=parent.owner,
                msg_rate=child.msg_rate,
                throughput_bytes=child.throughput_bytes,
                sessions=child.sessions,
                topics=child.topics,
                pinned=parent.pinned,
            )
            out[(state.namespace, state.bundle)] = state
            after_split[state.name] = split.decision_id
    return sorted(out.values(), key=lambda b: b.name), after_split


class _Cycle:
    """The plan's running state: loads, owners, counts, budgets."""

    def __init__(
        self,
        brokers: Sequence[BrokerState],
        bundles: Sequence[BundleState],
        rules: PlacementRules,
        settings: MoveSettings,
        now_ms: int,
        busy_ranges: frozenset[str] = frozenset(),
    ) -> None:
        self.brokers = {b.broker: b for b in sorted(brokers, key=lambda b: b.broker)}
        self.active = sorted(b for b, s in self.brokers.items() if s.active)
        self.rules = rules
        self.settings = settings
        self.now_ms = now_ms
        # A move shifts traffic; a broker's load is max(its floor, its traffic).
        self.traffic = {b: max(0.0, s.traffic) for b, s in self.brokers.items()}
        self.floor = {b: max(0.0, s.floor_ratio) for b, s in self.brokers.items()}
        self.loads = {b: max(self.floor[b], self.traffic[b]) for b in self.brokers}
        # cpu and bandwidth apart, where the report gives them (else the traffic is one number).
        self.resources: dict[str, tuple[float, float]] = {
            b: (max(0.0, s.cpu_ratio), max(0.0, s.bandwidth_ratio))
            for b, s in self.brokers.items()
            if s.cpu_ratio is not None and s.bandwidth_ratio is not None
        }
        self.topics = {b: s.topic_count for b, s in self.brokers.items()}
        self.owner = {b.name: b.owner for b in bundles}
        self.bundles = {b.name: b for b in bundles}
        self.moved: set[str] = set()
        self.moves_of: dict[str, int] = dict.fromkeys(self.brokers, 0)
        self.moves = 0
        self.domains = {b: s.failure_domain for b, s in self.brokers.items()}
        self._allowed: dict[str, frozenset[str]] = {}
        # Bare ranges with a move in flight in the cluster, and those moved this cycle: the
        # modular load manager keeps ONE destination per range (bundleBrokerAffinityMap).
        self.busy_ranges: set[str] = set(busy_ranges)

    def active_loads(self) -> dict[str, float]:
        return {b: self.loads[b] for b in self.active}

    def load_on(self, bundle: BundleState, broker: str) -> float:
        return bundle_load_ratio(
            bundle.msg_rate, bundle.throughput_bytes, self.brokers[broker].capacity
        )

    def owned(self, broker: str) -> list[BundleState]:
        return [b for name, b in self.bundles.items() if self.owner[name] == broker]

    def in_grace(self, bundle: BundleState) -> bool:
        last = bundle.last_moved_ms
        return last is not None and self.now_ms - last < self.settings.grace_period_s * 1000.0

    def rested(self, bundle: BundleState) -> bool:
        """Not moved this cycle, out of its grace period, and not moved its share of a roll."""
        return (
            bundle.name not in self.moved
            and not self.in_grace(bundle)
            and bundle.moves_in_roll < MAX_MOVES_IN_ROLL  # a roll moved it its share already
        )

    def movable(self, bundle: BundleState) -> bool:
        """Not pinned, not a system namespace, and no other move of its range in flight."""
        return not (
            bundle.pinned
            or is_system_namespace(bundle.namespace)
            or str(bundle.bundle) in self.busy_ranges
        )

    def group_counts(self, bundle: BundleState) -> dict[str, int] | None:
        """Broker -> the namespaces of the bundle's anti-affinity group with a bundle on it,
        the bundle itself left out (LoadManagerShared.getAntiAffinityNamespaceOwnedBrokers
        counts namespaces, not bundles, pinned ones included); None: no group."""
        group = self.rules.anti_affinity.get(bundle.namespace)
        if not group or not group.strip():
            return None
        namespaces: dict[str, set[str]] = {}
        for name, other in self.bundles.items():
            if name == bundle.name:
                continue
            if same_group(self.rules.anti_affinity.get(other.namespace), group):
                namespaces.setdefault(self.owner[name], set()).add(other.namespace)
        return {broker: len(names) for broker, names in namespaces.items()}

    def destinations(self, bundle: BundleState, source: str) -> list[str]:
        """The brokers the placement rules allow for the bundle, apart from its source."""
        if bundle.namespace not in self._allowed:
            self._allowed[bundle.namespace] = isolation_allowed(
                bundle.namespace, list(self.brokers.values()), self.rules
            )
        allowed = set(self._allowed[bundle.namespace])
        counts = self.group_counts(bundle)
        if counts is not None:
            # The source stays a candidate: a move may not leave the bundle's group worse
            # spread than staying put would.
            allowed = set(
                anti_affinity_allowed(
                    allowed | {source},
                    counts,
                    self.domains,
                    domains_enabled=self.rules.failure_domains_enabled,
                )
            )
        limit = self.rules.max_topics_per_broker
        return sorted(b for b in allowed if b != source and self.topics[b] + bundle.topics <= limit)

    def _moved(
        self, bundle: BundleState, broker: str, sign: float
    ) -> tuple[float, tuple[float, float] | None]:
        """The broker's traffic, and its (cpu, bandwidth), with the bundle added (sign 1) or
        taken away (-1)."""
        resources = self.resources.get(broker)
        if resources is None:
            return max(0.0, self.traffic[broker] + sign * self.load_on(bundle, broker)), None
        capacity = self.brokers[broker].capacity
        cpu_cost = bundle_load_ratio(bundle.msg_rate, 0.0, capacity)
        bandwidth_cost = bundle_load_ratio(0.0, bundle.throughput_bytes, capacity)
        cpu, bandwidth = resources
        new = (max(0.0, cpu + sign * cpu_cost), max(0.0, bandwidth + sign * bandwidth_cost))
        # By the change of the larger resource: the traffic may carry what neither term shows.
        return max(0.0, self.traffic[broker] + max(new) - max(resources)), new

    def after(self, bundle: BundleState, broker: str, sign: float) -> float:
        """The broker's load with the bundle added (sign 1) or taken away (-1)."""
        return max(self.floor[broker], self._moved(bundle, broker, sign)[0])

    def apply(self, bundle: BundleState, source: str, destination: str) -> tuple[float, float]:
        for b, sign in ((source, -1.0), (destination, 1.0)):
            traffic, resources = self._moved(bundle, b, sign)
            self.traffic[b] = traffic
            if resources is not None:
                self.resources[b] = resources
            self.loads[b] = max(self.floor[b], self.traffic[b])
        self.topics[source] -= bundle.topics
        self.topics[destination] += bundle.topics
        self.owner[bundle.name] = destination
        self.moved.add(bundle.name)
        self.busy_ranges.add(str(bundle.bundle))
        self.moves_of[source] += 1
        self.moves_of[destination] += 1
        self.moves += 1
        return self.loads[source], self.loads[destination]


_Candidate = tuple[BundleState, str, float, float, float]  # bundle, dest, on_src, src, dst


def _best_move(
    cycle: _Cycle, source: str, excess: float, only_to: frozenset[str] | None
) -> tuple[_Candidate | None, BlockReason]:
    """The bundle of `source` that best covers `excess`, and its destination; else why not."""
    settings = cycle.settings
    before = cycle.loads[source]
    high = target_ratio(cycle.active_loads(), settings)
    if cycle.moves >= settings.max_moves_per_cluster:
        return None, BlockReason.BUDGET
    owned = [
        b for b in cycle.owned(source) if not b.pinned and not is_system_namespace(b.namespace)
    ]
    sized = [b for b in owned if cycle.load_on(b, source) >= settings.min_bundle_load_ratio]
    if not sized:
        return None, BlockReason.TOO_SMALL
    rested = [b for b in sized if cycle.rested(b)]
    if not rested:
        return None, BlockReason.GRACE_PERIOD
    movable = [b for b in rested if cycle.movable(b)]
    if not movable:
        return None, BlockReason.RANGE_IN_FLIGHT
    if cycle.moves_of[source] >= settings.max_moves_per_broker:
        return None, BlockReason.BUDGET
    feasible: list[_Candidate] = []
    for bundle in movable:
        on_source = cycle.load_on(bundle, source)
        source_after = cycle.after(bundle, source, -1.0)
        best: tuple[float, str] | None = None
        for dest in cycle.destinations(bundle, source):
            if only_to is not None and dest not in only_to:
                continue
            if cycle.moves_of[dest] >= settings.max_moves_per_broker:
                continue
            dest_after = cycle.after(bundle, dest, 1.0)
            # The most loaded of the two must end strictly under the source's load before,
            # and the destination within the target unless it ends no higher than the source
            # (an overloaded cluster still evens out).
            if max(source_after, dest_after) >= before - EPSILON:
                continue
            if dest_after > max(high, source_after) + EPSILON:
                continue
            if best is None or (dest_after, dest) < best:
                best = (dest_after, dest)
        if best is not None:
            feasible.append((bundle, best[1], on_source, source_after, best[0]))
    if not feasible:
        largest = max(cycle.load_on(b, source) for b in movable)
        rest = fsum(cycle.load_on(b, source) for b in movable) - largest
        if largest >= excess - EPSILON and rest < excess - EPSILON:
            return None, BlockReason.SINGLE_BUNDLE
        return None, BlockReason.NO_DESTINATION
    covering = [c for c in feasible if c[2] >= excess - EPSILON]
    low = _mean(cycle.active_loads()) - settings.margin
    if any(v < low - EPSILON for v in cycle.active_loads().values()):
        # An idle broker waits: a bundle that also lifts its destination out of idle saves
        # the move that would fill it next.
        filling = [c for c in covering if c[4] >= low - EPSILON]
        covering = filling or covering
    if covering:
        # The smallest bundle that brings the source to target: one move, least load moved.
        choice = min(covering, key=lambda c: (c[2], c[0].sessions, c[0].name))
    else:
        # None is enough alone: the largest that fits, so the fewest moves follow.
        choice = min(feasible, key=lambda c: (-c[2], c[0].sessions, c[0].name))
    return choice, BlockReason.NO_DESTINATION


def decide_moves(
    cluster: str,
    brokers: Sequence[BrokerState],
    bundles: Sequence[BundleState],
    *,
    rules: PlacementRules,
    settings: MoveSettings,
    now_ms: int,
    window_end_ms: int,
    splits: Sequence[SplitDecision] = (),
    busy_ranges: frozenset[str] = frozenset(),
    draining: frozenset[str] = frozenset(),
    drain_pace: DrainPace | None = None,
    drain_destinations: tuple[frozenset[str], ...] | None = None,
) -> MovePlan:
    """The moves of one cluster for one window. `splits` are the split decisions of the same
    cycle: each parent bundle is replaced by its children (on the parent's owner, with the
    loads the split computed), and children may be given destinations (reason SPLIT_CHILD).

    `busy_ranges`: bare ranges (`0x..._0x..`) with a move in flight in the cluster (sent,
    its bundle not owned again yet). No bundle with such a range is moved, and at most one
    bundle per range is moved in a cycle: the modular load manager keeps one destination
    per range for the next lookup of any bundle with it. Pinned bundles and system
    namespaces count (load, anti-affinity, topics) but never move.

    `draining`: broker ids marked draining (balancer.core.moves.drain): never a destination,
    left out of the balance (as if gone), and each bundle they own moved off first (reason
    DRAIN) or named in `drain_blocked`, at most as many as `drain_pace` allows (None: all).
    Ids that are no broker of `brokers` are ignored.

    `drain_destinations`: the drain's destination tiers in preference order (a rolling
    restart's, `balancer.core.rollout.drain_destinations`); each bundle goes to the first
    tier with room, the rules and target unchanged; those placed outside the first are named
    in `drain_fallback`; the cycle's balance moves go only to the first tier. None: every
    staying broker alike."""
    all_bundles, after_split = with_splits(bundles, splits)
    known = {b.broker for b in brokers}
    all_bundles = [b for b in all_bundles if b.owner in known]  # an unknown owner: not ours
    draining = frozenset(d for d in draining if d in known)
    # A draining broker is seen inactive: no rule allows it, no target counts it.
    seen = [replace(b, active=False) if b.broker in draining else b for b in brokers]
    cycle = _Cycle(seen, all_bundles, rules, settings, now_ms, busy_ranges)
    loads_before = dict(cycle.loads)
    balanced_before = is_balanced(cycle.active_loads(), settings)
    drained, drain_blocked, drain_fallback = plan_drain(
        cycle, draining, drain_pace, drain_destinations
    )
    moves = [
        decision_of(cluster, window_end_ms, m, MoveReason.DRAIN, after_split.get(m.bundle.name))
        for m in drained
    ]
    # During a roll's drain (its broker marked, listed or gone while it restarts), balance
    # moves too go only to the preferred (settled) brokers: a bundle sent to a broker still
    # to restart would move once more.
    settled = drain_destinations[0] if drain_destinations else None
    while not is_balanced(cycle.active_loads(), settings):
        active = cycle.active_loads()
        mean = _mean(active)
        high = target_ratio(active, settings)
        by_load = sorted(active, key=lambda b: (-active[b], b))
        over = [b for b in by_load if active[b] > high + EPSILON]
        idle = frozenset(b for b in active if active[b] < mean - settings.margin - EPSILON)
        if settled is not None:
            # During a roll only an overloaded broker is relieved (to a settled one): any
            # other balance move takes room the next drain needs; the balance after the
            # roll evens the rest out.
            over = [b for b in over if active[b] > settings.overload_ratio + EPSILON]
            idle = frozenset()
        attempts: list[tuple[str, float, frozenset[str] | None]] = [
            (b, active[b] - high, settled) for b in over
        ]
        made, filling = False, None  # filling: see fill_moves (None: no fill planned)
        target = min(idle, key=lambda b: (active[b], b)) if idle else None

        # The fill first where the idle broker has room for what every broker over target
        # must shed (the fill counts those moves); else they spread first, to any broker.
        fill_first = target is not None and fsum(active[b] - high for b in over) <= (
            high - active[target] + EPSILON
        )
        fill = (cluster, cycle, target, mean - settings.margin, high, after_split, window_end_ms)
        if fill_first:
            filling = _fill(*fill, moves)
            made = bool(filling)
        for source, excess, only_to in [] if made else attempts:
            candidate, _ = _best_move(cycle, source, excess, only_to)
            if candidate is None:
                continue
            bundle, dest, _, _, _ = candidate
            reason = MoveReason.ABOVE_MEAN if only_to is None else MoveReason.IDLE_BROKER
            moves.append(
                _record(cluster, cycle, bundle, source, dest, reason, after_split, window_end_ms)
            )
            made = True
            break
        if not made and target is not None and not fill_first:
            filling = _fill(*fill, moves)
            made = bool(filling)
        if not made and idle and filling is None:  # no fill planned: one at a time
            for source in (b for b in by_load if active[b] > mean):
                candidate, _ = _best_move(cycle, source, active[source] - mean, idle)
                if candidate is None:
                    continue
                bundle, dest, _, _, _ = candidate
                moves.append(
                    _record(
                        cluster, cycle, bundle, source, dest, MoveReason.IDLE_BROKER, after_split,
                        window_end_ms,
                    )
                )  # fmt: skip
                made = True
                break
        if not made:
            break
    active_after = cycle.active_loads()
    high_after = target_ratio(active_after, settings)
    # Over target with no permitted move: say why (the last check that failed for it).
    still_over = sorted(b for b in active_after if active_after[b] > high_after + EPSILON)
    blocked = {b: _best_move(cycle, b, active_after[b] - high_after, None)[1] for b in still_over}
    return MovePlan(
        cluster=cluster,
        window_end_ms=window_end_ms,
        moves=tuple(moves),
        loads_before=loads_before,
        loads_after=dict(cycle.loads),
        blocked=tuple(
            BlockedBroker(broker=b, load_ratio=cycle.loads[b], reason=blocked[b])
            for b in still_over
        ),
        balanced_before=balanced_before,
        balanced_after=is_balanced(active_after, settings),
        draining=tuple(sorted(draining)),
        drain_blocked=tuple(drain_blocked),
        drain_fallback=tuple(drain_fallback),
    )


def _record(
    cluster: str,
    cycle: _Cycle,
    bundle: BundleState,
    source: str,
    dest: str,
    reason: MoveReason,
    after_split: Mapping[str, str],
    window_end_ms: int,
) -> MoveDecision:
    """Applies the move to the cycle and gives its decision; the reason is the given one
    unless the bundle is a split's child or its source is overloaded."""
    on_source = cycle.load_on(bundle, source)
    before_src, before_dst = cycle.loads[source], cycle.loads[dest]
    after_src, after_dst = cycle.apply(bundle, source, dest)
    move = DrainMove(bundle, source, dest, on_source, before_src, before_dst, after_src, after_dst)
    reason = reason_of(move, reason, after_split, cycle.settings)
    return decision_of(cluster, window_end_ms, move, reason, after_split.get(bundle.name))


def _fill(
    cluster: str,
    cycle: _Cycle,
    target: str | None,
    low: float,
    high: float,
    after_split: Mapping[str, str],
    window_end_ms: int,
    moves: list[MoveDecision],
) -> list[DrainMove] | None:
    """The most idle broker filled by the fewest moves that lift it (fill.py), each
    decision appended to `moves`."""
    assert target is not None
    filled = fill_moves(cycle, target, low, high)
    for m in filled or ():
        reason = reason_of(m, MoveReason.IDLE_BROKER, after_split, cycle.settings)
        moves.append(decision_of(cluster, window_end_ms, m, reason, after_split.get(m.bundle.name)))
    return filled
