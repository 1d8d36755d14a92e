"""The moves of one cluster for one closed window: the broker board's loads, the window's
bundle loads and the placement rules read from Pulsar, handed to the pure decision
(`balancer.core.moves.decide.decide_moves`).

Placement rules (isolation policies, failure domains and whether the brokers use them,
anti-affinity groups) are read from the cluster and cached for `rules_ttl_s`. A cluster
whose rules cannot be read gets no move: a move that breaks an isolation policy is worse than
no move. An isolation pattern Python cannot read as Java does (`\\Q...\\E`, `\\p{...}`)
makes the rules unreadable too (`UnreadableRules`): read as matching nothing, it would turn
isolated brokers into shared ones. `run` (each window) and `plan` (once) share this code, so
they agree on moves.

Every bundle of the window counts (its broker's load, its anti-affinity group), but only
those of namespaces the controller may act on are moved; system namespaces never are. A
bundle range with a move in flight (`ranges_in_flight`) is not moved again until that move
settled: the modular load manager keeps one destination per bare range.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from balancer.controller.broker_board import BrokerLoadBoard, BrokerWindow
from balancer.controller.drain_progress import DrainProgress
from balancer.core.broker_load import (
    REPORT_SETTLE_MS,
    BrokerCapacity,
    BrokerLoad,
    broker_load_from_bundles,
    broker_load_from_reports,
)
from balancer.core.bundles import BundleRange
from balancer.core.decisions import SplitDecision
from balancer.core.load import BundleLoad
from balancer.core.moves.decide import decide_moves
from balancer.core.moves.drain import DrainPace
from balancer.core.moves.inputs import broker_states, bundle_states
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    IsolationPolicy,
    MovePlan,
    MoveReason,
    MoveSettings,
    PlacementRules,
)
from balancer.core.moves.placement import is_system_namespace, unreadable_patterns
from balancer.core.rollout import drain_destinations

log = logging.getLogger(__name__)


class PlacementReads(Protocol):
    """The admin reads behind the placement rules (`balancer.pulsar.PulsarPeerGroup`)."""

    def isolation_policies(self, cluster: str) -> tuple[IsolationPolicy, ...]: ...

    def failure_domains(self, cluster: str) -> Mapping[str, tuple[str, ...]]: ...

    def anti_affinity_group(self, namespace: str, *, cluster: str | None = None) -> str | None: ...

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]: ...


class UnreadableRules(ValueError):
    """Isolation patterns Python cannot read as Java does: the cluster's rules are unknown."""

    def __init__(self, cluster: str, patterns: Sequence[str]) -> None:
        super().__init__(
            f"isolation policy pattern(s) Python cannot read as Java does: "
            f"{', '.join(repr(p) for p in patterns)}"
        )
        self.cluster = cluster
        self.patterns = tuple(patterns)


def failure_domains_enabled(config: Mapping[str, str]) -> bool:
    """ServiceConfiguration.failureDomainsEnabled (static, default false) as the brokers'
    runtime configuration answers it."""
    return config.get("failureDomainsEnabled", "false").strip().lower() == "true"


@dataclass(frozen=True, slots=True)
class ClusterRules:
    rules: PlacementRules
    failure_domains: Mapping[str, str]  # broker -> domain
    read_at_s: float


class RulesCache:
    """Each cluster's placement rules, read again after `ttl_s`."""

    def __init__(
        self,
        admin: PlacementReads,
        *,
        ttl_s: float,
        max_topics_per_broker: int,
        monotonic: Callable[[], float],
    ) -> None:
        self.admin = admin
        self.ttl_s = ttl_s
        self.max_topics_per_broker = max_topics_per_broker
        self.monotonic = monotonic
        self._cached: dict[str, ClusterRules] = {}
        self._groups: dict[tuple[str, str], tuple[str | None, float]] = {}

    def rules(self, cluster: str, namespaces: Sequence[str]) -> ClusterRules:
        """Raises as the admin client does when a rule cannot be read."""
        now_s = self.monotonic()
        cached = self._cached.get(cluster)
        if cached is None or now_s - cached.read_at_s >= self.ttl_s:
            isolation = self.admin.isolation_policies(cluster)
            unreadable = unreadable_patterns(isolation)
            if unreadable:
                self._cached.pop(cluster, None)
                raise UnreadableRules(cluster, unreadable)
            domains = {
                broker: domain
                for domain, brokers in sorted(self.admin.failure_domains(cluster).items())
                for broker in brokers
            }
            base = PlacementRules(
                isolation=isolation,
                max_topics_per_broker=self.max_topics_per_broker,
                failure_domains_enabled=failure_domains_enabled(
                    self.admin.runtime_configuration(cluster)
                ),
            )
            cached = ClusterRules(base, domains, now_s)
            self._cached[cluster] = cached
        groups: dict[str, str] = {}
        for namespace in sorted(set(namespaces)):
            if is_system_namespace(namespace):
                continue  # never moved, in no group (and V1 heartbeats have no V2 path)
            known = self._groups.get((cluster, namespace))
            if known is None or now_s - known[1] >= self.ttl_s:
                known = (self.admin.anti_affinity_group(namespace, cluster=cluster), now_s)
                self._groups[(cluster, namespace)] = known
            if known[0]:
                groups[namespace] = known[0]
        rules = PlacementRules(
            isolation=cached.rules.isolation,
            anti_affinity=groups,
            max_topics_per_broker=cached.rules.max_topics_per_broker,
            failure_domains_enabled=cached.rules.failure_domains_enabled,
        )
        return ClusterRules(rules, cached.failure_domains, cached.read_at_s)


@dataclass(frozen=True, slots=True)
class ClusterLoads:
    """A cluster's broker loads for one window (what `plan` and the live view show)."""

    brokers: tuple[BrokerLoad, ...]
    owners: Mapping[str, str]  # bundle name -> broker


def cluster_loads(
    windows: Sequence[BrokerWindow],
    bundles: Sequence[BundleLoad],
    *,
    settings: MoveSettings,
    capacity_of: Callable[[str, str], BrokerCapacity],
    window_end_ms: int,
) -> ClusterLoads:
    """Each broker's windowed load, from its load reports when it has some, else from its
    bundles against its configured capacity."""
    owners: dict[str, str] = {}
    for window in windows:
        owned = set(window.owned_bundles)
        if window.reports:
            owned.update(window.reports[-1].bundles)
        for name in owned:
            owners.setdefault(name, window.broker)
    by_broker: dict[str, list[BundleLoad]] = {w.broker: [] for w in windows}
    for load in bundles:
        owner = owners.get(f"{load.namespace}/{load.bundle}")
        if owner is not None:
            by_broker[owner].append(load)
    loads = []
    for window in windows:
        mine = by_broker[window.broker]
        if window.reports:
            loads.append(
                broker_load_from_reports(
                    window.reports, mine, weights=settings.weights, window_end_ms=window_end_ms
                )
            )
        else:
            loads.append(
                broker_load_from_bundles(
                    window.cluster,
                    window.broker,
                    mine,
                    capacity=capacity_of(window.cluster, window.broker),
                    window_end_ms=window_end_ms,
                )
            )
    return ClusterLoads(tuple(loads), owners)


# Drain pace defaults (`moves.drain_moves_in_flight_per_broker`, `moves.drain_moves_per_minute`).
DRAIN_IN_FLIGHT_PER_BROKER = 4
DRAIN_MOVES_PER_MINUTE = 20


class MovePlanner:
    def __init__(
        self,
        board: BrokerLoadBoard,
        rules: RulesCache,
        *,
        settings: MoveSettings,
        capacity_of: Callable[[str, str], BrokerCapacity],
        window_s: float,
        last_moves_ms: Callable[[str], Mapping[str, int]],
        movable: Callable[[str], bool] = lambda _namespace: True,
        ranges_in_flight: Callable[[str], frozenset[str]] = lambda _cluster: frozenset(),
        report_settle_ms: int = REPORT_SETTLE_MS,
        draining_of: Callable[[str], frozenset[str]] = lambda _cluster: frozenset(),
        moves_in_flight_from: Callable[[str], Mapping[str, int]] = lambda _cluster: {},
        drain_moves_in_flight_per_broker: int = DRAIN_IN_FLIGHT_PER_BROKER,
        drain_moves_per_minute: int = DRAIN_MOVES_PER_MINUTE,
        pace_drains: bool = True,
        rollout_order_of: Callable[[str], tuple[str, ...]] = lambda _cluster: (),
        roll_moves_of: Callable[[str], Mapping[str, int]] = lambda _cluster: {},
    ) -> None:
        """`movable`: namespaces the controller may act on (its allow/deny lists): the
        others' bundles still load their brokers and count for anti-affinity but are never
        moved, so they take no part of a cycle's move budget. `ranges_in_flight`: cluster
        -> bare bundle ranges with a move sent and not settled (`move_steps.ranges_in_flight`).
        `report_settle_ms`: a broker's reports count again once polled this long after a
        move from or to it (before, its usages still describe the old layout:
        `balancer.core.broker_load.REPORT_SETTLE_MS`). `draining_of`: cluster -> broker ids
        marked draining (never a destination; emptied: `balancer.core.moves.drain`) at a
        pace: at most `drain_moves_in_flight_per_broker` moves in flight out of each (as
        `moves_in_flight_from`, cluster -> source -> moves, counts them) and
        `drain_moves_per_minute` drain moves decided per cluster in any minute; with
        `pace_drains` False (`plan --drain`), every drain move at once (`apply` sends them
        one by one under the controller's rate limits). `rollout_order_of`: cluster -> the
        restart order of a roll in progress (`roll start`; () when none): a drain then sends
        its bundles to the brokers that already restarted (`balancer.core.rollout`).
        `roll_moves_of`: cluster -> bundle name -> its moves since the last roll started
        (while they count); a bundle at `MAX_MOVES_IN_ROLL` gets no balance move."""
        self.rollout_order_of = rollout_order_of
        # cluster -> bundle name -> its moves since the last roll started, while they count
        self.roll_moves_of = roll_moves_of
        self.board = board
        self.draining_of = draining_of
        self.moves_in_flight_from = moves_in_flight_from
        self.drain_in_flight_per_broker = drain_moves_in_flight_per_broker
        self.drain_per_minute = drain_moves_per_minute
        self.pace_drains = pace_drains
        self._drains: dict[str, deque[int]] = {}  # cluster -> when each drain move was decided
        self.drain_progress = DrainProgress()  # bundles left per draining broker (metrics)
        self.movable = movable
        self.ranges_in_flight = ranges_in_flight
        # cluster -> the isolation patterns that made its rules unreadable (a gauge and alert)
        self.unreadable_rules: dict[str, tuple[str, ...]] = {}
        self.rules = rules
        self.settings = settings
        self.capacity_of = capacity_of
        self.window_ms = int(window_s * 1000)
        self.last_moves_ms = last_moves_ms
        self.report_settle_ms = report_settle_ms
        self.last_loads: dict[str, ClusterLoads] = {}  # cluster -> its newest window's
        self.last_plans: dict[str, MovePlan] = {}
        # cluster -> brokers without measured usages beside measured ones: no moves there
        self.unmeasured: dict[str, tuple[str, ...]] = {}
        # (cluster, broker) -> (when a plan moved a bundle from or to it, its projected load):
        # its load reports from before then describe bundles it no longer has (or not yet).
        self._moved: dict[tuple[str, str], tuple[int, float]] = {}

    def plan(
        self,
        cluster: str,
        bundles: Sequence[BundleLoad],
        *,
        window_end_ms: int,
        now_ms: int,
        splits: Sequence[SplitDecision] = (),
    ) -> MovePlan | None:
        """The cluster's moves for the window ending at `window_end_ms`; None when no broker
        of it was read lately, or its placement rules cannot be read (logged).

        Bundle loads are the closed window's; broker loads are the load reports of the last
        window length before `now_ms` (the freshest picture of what each broker carries),
        less those a broker gave before a move this planner made from or to it. A broker
        left with no report polled `report_settle_ms` after its move counts at the load
        the plan projected for it, so a move is not decided twice on usages sampled
        before it (Pulsar samples cpu and bandwidth once a minute, each sample the
        average of the minute before)."""
        windows = self.board.window(cluster, start_ms=now_ms - self.window_ms, end_ms=now_ms + 1)
        if not windows:
            return None
        windows = [self._since_move(cluster, w) for w in windows]
        loads = cluster_loads(
            windows,
            bundles,
            settings=self.settings,
            capacity_of=self.capacity_of,
            window_end_ms=window_end_ms,
        )
        loads = ClusterLoads(
            tuple(self._projected(cluster, load) for load in loads.brokers), loads.owners
        )
        self.last_loads[cluster] = loads
        self.drain_progress.observe(
            cluster, self.draining_of(cluster), loads.owners, {w.broker for w in windows}
        )
        if not self._all_measured_alike(cluster, loads):
            return None
        idle = _idle_owned(loads.owners, bundles)
        try:
            namespaces = [b.namespace for b in bundles] + [b.namespace for b in idle]
            rules = self.rules.rules(cluster, namespaces)
            self.unreadable_rules.pop(cluster, None)
        except UnreadableRules as exc:
            if self.unreadable_rules.get(cluster) != exc.patterns:  # one line per change
                log.error(
                    "moves: the placement rules of %s are unreadable (%s): no move in this "
                    "cluster until the policy is rewritten in syntax both Java and Python "
                    "read (docs/runbook.md)",
                    cluster,
                    exc,
                )
            self.unreadable_rules[cluster] = exc.patterns
            return None
        except Exception as exc:  # an admin error: no move without the rules
            log.warning(
                "moves: the placement rules of %s cannot be read (%s): no move this window",
                cluster,
                exc,
            )
            return None
        draining = self.draining_of(cluster)
        brokers = broker_states(
            loads.brokers,
            weights=self.settings.weights,
            configured={w.broker: self.capacity_of(cluster, w.broker) for w in windows},
            failure_domains=rules.failure_domains,
        )
        roll_moves = self.roll_moves_of(cluster)
        states = [
            replace(
                state,
                pinned=not self.movable(state.namespace),
                moves_in_roll=roll_moves.get(state.name, 0),
            )
            for state in (
                *bundle_states(bundles, loads.owners, self.last_moves_ms(cluster)),
                *idle,
            )
        ]
        plan = decide_moves(
            cluster,
            brokers,
            states,
            rules=rules.rules,
            settings=self.settings,
            now_ms=now_ms,
            window_end_ms=window_end_ms,
            splits=[s for s in splits if s.cluster == cluster],
            busy_ranges=self.ranges_in_flight(cluster),
            draining=draining,
            drain_pace=self._drain_pace(cluster, draining, now_ms) if self.pace_drains else None,
            drain_destinations=self._drain_destinations(cluster, brokers, draining),
        )
        if plan.drain_fallback:
            log.info(
                "moves: %s: %d drained bundle(s) placed on brokers still to restart (no room "
                "on those that restarted; each moves once more): %s",
                cluster,
                len(plan.drain_fallback),
                ", ".join(f"{b} -> {d}" for b, d in plan.drain_fallback[:10]),
            )
        drains = self._drains.setdefault(cluster, deque())
        drains.extend(now_ms for m in plan.moves if m.reason is MoveReason.DRAIN)
        self.last_plans[cluster] = plan
        for move in plan.moves:
            self._moved[(cluster, move.source)] = (now_ms, plan.loads_after[move.source])
            self._moved[(cluster, move.destination)] = (
                now_ms,
                plan.loads_after[move.destination],
            )
        return plan

    def _drain_destinations(
        self, cluster: str, brokers: Sequence[BrokerState], draining: frozenset[str]
    ) -> tuple[frozenset[str], ...] | None:
        order = self.rollout_order_of(cluster) if draining else ()
        if not order:
            return None
        return drain_destinations(order, [b.broker for b in brokers], draining)

    def _drain_pace(self, cluster: str, draining: frozenset[str], now_ms: int) -> DrainPace:
        """What this cycle may start: each draining broker's in-flight limit less its moves
        in flight, and the cluster's per-minute limit less the drain moves of the last
        minute (`now_ms` is the clock's: time is passed in)."""
        drains = self._drains.setdefault(cluster, deque())
        while drains and drains[0] <= now_ms - 60_000:
            drains.popleft()
        in_flight = self.moves_in_flight_from(cluster) if draining else {}
        return DrainPace(
            per_broker={
                b: max(0, self.drain_in_flight_per_broker - in_flight.get(b, 0)) for b in draining
            },
            cluster=max(0, self.drain_per_minute - len(drains)),
        )

    def _all_measured_alike(self, cluster: str, loads: ClusterLoads) -> bool:
        """Brokers measured from their own usages (load report, load metrics) and brokers
        whose load is a configured guess (their bundles against `broker_capacity`) are
        never compared in one plan: the cluster gets no moves while both kinds are in it
        (logged when the set of unmeasured brokers changes)."""
        unmeasured = tuple(sorted(b.broker for b in loads.brokers if not b.source.measured))
        mixed = bool(unmeasured) and len(unmeasured) < len(loads.brokers)
        shown = unmeasured if mixed else ()
        if self.unmeasured.get(cluster, ()) != shown:
            if mixed:
                log.warning(
                    "moves: %s: no moves while %s cannot be measured (no load report nor "
                    "load metrics) beside brokers that can: their loads are not comparable",
                    cluster,
                    ", ".join(unmeasured),
                )
            else:
                log.info("moves: %s: every broker is measured alike again", cluster)
        self.unmeasured[cluster] = shown
        return not mixed

    def _since_move(self, cluster: str, window: BrokerWindow) -> BrokerWindow:
        moved = self._moved.get((cluster, window.broker))
        if moved is None:
            return window
        if not window.reports:  # load from its bundles: a poll since the move shows it
            if window.last_poll_ms > moved[0]:
                del self._moved[(cluster, window.broker)]
            return window
        settled_ms = moved[0] + self.report_settle_ms
        fresh = tuple(r for r in window.reports if r.timestamp_ms >= settled_ms)
        if fresh:
            del self._moved[(cluster, window.broker)]  # its reports show the move now
        return replace(window, reports=fresh) if fresh else window

    def _projected(self, cluster: str, load: BrokerLoad) -> BrokerLoad:
        moved = self._moved.get((cluster, load.broker))
        if moved is None:
            return load
        return replace(load, load_ratio=moved[1])


def _idle_owned(owners: Mapping[str, str], bundles: Sequence[BundleLoad]) -> list[BundleState]:
    """Bundles a broker owns that carried no traffic in the window (so are not among
    `bundles`), at zero load: they still count for anti-affinity as Pulsar counts every owned
    bundle (LoadManagerShared.getAntiAffinityNamespaceOwnedBrokers). System namespaces and
    names that are no `tenant/ns/range` are left out."""
    seen = {f"{b.namespace}/{b.bundle}" for b in bundles}
    out = []
    for name, owner in sorted(owners.items()):
        namespace, _, bundle = name.rpartition("/")
        if name in seen or namespace.count("/") != 1 or is_system_namespace(namespace):
            continue
        try:
            rng = BundleRange.parse(bundle)
        except ValueError:
            continue
        out.append(BundleState(namespace=namespace, bundle=rng, owner=owner))
    return out
