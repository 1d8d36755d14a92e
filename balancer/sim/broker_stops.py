"""A broker that stops, one that joins, and a rolling restart, as Pulsar's source does them
(issue 43, point 6). Each behaviour names the Java class it copies.

**A broker that stops gracefully** (SIGTERM: `PulsarServiceShutdownHook` ->
`PulsarService.closeAsync` -> `BrokerService.closeAsync` ->
`BrokerService.unloadNamespaceBundlesGracefully()`, i.e. `(maxConcurrentUnload=0,
closeWithoutWaitingClientDisconnect=true)`):

- `LoadManager.disableBroker` first: the broker leaves `/loadbalance/brokers`, so it is no
  longer listed and no placement picks it.
- Modular load manager (`ModularLoadManagerImpl`): then every bundle it owns is unloaded,
  one after another (each `NamespaceService.unloadNamespaceBundle(...).get(timeout)`, with
  `namespaceBundleUnloadingTimeoutMs` = 60 s each; no rate limit, since maxConcurrentUnload
  is 0 on this path; the whole close is bounded by `brokerShutdownTimeoutMs`). Each
  bundle's clients reconnect and look it up; the leader places it with
  `ModularLoadManagerImpl.selectBrokerForAssignment`: the namespace's isolation policy
  over the active brokers (`LoadManagerShared.applyNamespacePolicies`), then
  "distribute bundles evenly" (`LoadManagerShared.removeMostServicingBrokersForNamespace`:
  only the brokers with the fewest bundles of that namespace, counting the ones just
  assigned), then the placement strategy, default `LeastLongTermMessageRate`
  (`loadBalancerLoadPlacementStrategy`): the lowest long-term msg rate in + out, counting
  the bundles preallocated to it. The simulator places each bundle at once (the clients'
  backoff starts at 100 ms) on the lowest rate now, ties to the lowest index (Pulsar picks
  at random among equal scores); a broker over 85 %
  (`loadBalancerBrokerOverloadedThresholdPercentage`, on its last load report) scores
  infinity, and when the pick is over 85 % the choice is made again over every allowed
  broker. Not modelled: the max-topics, anti-affinity and failure-domain filters.
- Extensible load manager (`ExtensibleLoadManagerImpl.disableBroker` ->
  `ServiceUnitStateChannelImpl.cleanOwnerships` -> `doCleanup(broker, gracefully=true)`):
  every bundle it owns is overridden in one pass (each override published and awaited in
  turn; no batches) to a broker chosen by `ExtensibleLoadManagerImpl.selectAsync` excluding
  the stopping one, whose default strategy `LeastResourceUsageWithWeight` picks at random
  among the brokers whose weighted max usage is at least
  `loadBalancerAverageResourceUsageDifferenceThresholdPercentage` (10) points under the
  candidates' average, or among all when none is. The broker load data it reads is the last
  reported (not updated during the cleanup): the simulator reads every usage once, at the
  stop. A transfer: the destination owns the bundle at once (PIP-307).
- The leader: the simulator hands the leadership to the lowest-index active broker BEFORE
  the drain (Pulsar: the broker that wins the election; apache/pulsar's test
  `successorIsElectedBeforeBundleDrain` has the successor leading before the bundles are
  unloaded; older releases close `LeaderElectionService` after `BrokerService`). The old
  leader's `bundleBrokerAffinityMap` (destinations kept in its memory) is lost.
- Not modelled: time. Pulsar's drain takes about one bundle unload after another; the
  simulator does it at the instant of the stop.

**A broker that is killed** (`graceful=False`: kill -9, OOM, a lost node): no shutdown ran;
its ownership nodes are ephemeral and go with its metadata session, so its bundles are owned
by nobody until a lookup places them on an active broker (`ownership.active`).

Either way, afterwards: not listed by `GET /admin/v2/brokers/{cluster}`, its port refuses
connections (`RunningPeerGroup.stop_broker`), an unload to it answers 409 (inactive
destination, `NamespacesBase.setNamespaceBundleAffinityAsync`).

**A broker that joins** (`start_broker`: the pod restarted under the same id, or one of
`idle_brokers` at start): it registers (`ModularLoadManagerImpl.start` /
`BrokerRegistryImpl.register`), owns nothing and gets bundles only by lookups of unowned
bundles and by shedding. Its load samples and EMA start afresh.

**A rolling restart** (`RunningPeerGroup.rolling_restart`): a StatefulSet's
`RollingUpdate` restarts pods from the highest ordinal down, one at a time, each stopped and
started under the same id, the next only once the previous is Ready again.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from balancer.core.bundles import BundleRange
from balancer.sim.brokers import isolation_candidates
from balancer.sim.state import ClusterState, NamespaceState, ShutdownMove

if TYPE_CHECKING:
    from balancer.sim.model import SimModel

# ServiceConfiguration.loadBalancerAverageResourceUsageDifferenceThresholdPercentage.
USAGE_DIFFERENCE_THRESHOLD = 0.10
# ServiceConfiguration.loadBalancerBrokerOverloadedThresholdPercentage.
OVERLOAD_RATIO = 0.85


@dataclass(frozen=True)
class RestartStep:
    """One broker of a rolling restart: what it handed on when it stopped."""

    broker: int
    moves: list[ShutdownMove] = field(default_factory=list)


def statefulset_order(brokers: int) -> list[int]:
    """The order a StatefulSet's RollingUpdate restarts its pods: highest ordinal first."""
    return list(range(brokers - 1, -1, -1))


def stop_broker(
    model: SimModel, cluster: str, broker: int, *, graceful: bool = True
) -> list[ShutdownMove]:
    """The model's side of a broker stopping: unlisted, the leadership handed over, and its
    bundles handed on as its load manager does (graceful) or left unowned (killed)."""
    with model.lock:
        c = model.cluster(cluster)
        if not 0 <= broker < c.broker_count:
            raise ValueError(f"cluster {cluster} has no broker {broker}")
        if broker in c.stopped:
            raise ValueError(f"broker {broker} of cluster {cluster} is already stopped")
        model.settle()  # what ran until now ran with the broker there
        model.brokers.settle()
        c.stopped.add(broker)  # LoadManager.disableBroker: no placement picks it any more
        if broker == c.leader:
            _hand_over_leadership(c)
        owned = [
            (ns, b)
            for ns in model.namespaces.values()
            if ns.cluster == cluster
            for b in ns.layout.bundles
            if ns.owners[b] == broker and b not in ns.unowned
        ]
        moves: list[ShutdownMove] = []
        if graceful:
            load_manager = model.brokers.specs[cluster].load_manager
            if load_manager == "extensible":
                moves = _extensible_cleanup(model, c, broker, owned)
            else:
                moves = _modular_unloads(model, c, broker, owned)
            c.shutdown_moves.extend(moves)
        else:
            for ns, b in owned:
                ns.unowned.add(b)
        model.layout_version += 1
        return moves


def start_broker(model: SimModel, cluster: str, broker: int) -> None:
    """The broker joins again under the same id: listed, empty, its load history reset."""
    with model.lock:
        c = model.cluster(cluster)
        if broker not in c.stopped:
            raise ValueError(f"broker {broker} of cluster {cluster} is not stopped")
        c.stopped.discard(broker)
        model.brokers.lags.forget((cluster, broker))
        model.layout_version += 1


def _hand_over_leadership(c: ClusterState) -> None:
    """LeaderElectionService: the stopping leader's lock is released and another broker wins
    the election (the simulator: the lowest-index active one). The destinations kept in the
    old leader's memory (bundleBrokerAffinityMap) go with it."""
    actives = [b for b in range(c.broker_count) if b not in c.stopped]
    if actives:
        c.leader = actives[0]
    c.affinity.clear()


def _unload(model: SimModel, ns: NamespaceState, bundle: BundleRange) -> None:
    """The bundle's topics are closed on the stopping broker (offload statuses reset)."""
    model.storage.unload(model.bundle_slice(ns, bundle))


def _modular_unloads(
    model: SimModel, c: ClusterState, broker: int, owned: list[tuple[NamespaceState, BundleRange]]
) -> list[ShutdownMove]:
    """BrokerService.unloadNamespaceBundlesGracefully under ModularLoadManagerImpl: each
    bundle unloaded in turn, then placed by the leader's selectBrokerForAssignment."""
    fleet = model.brokers
    actives = [b for b in range(c.broker_count) if b not in c.stopped]
    rates = {b: 0.0 for b in actives}
    for ns in model.namespaces.values():
        if ns.cluster != c.name:
            continue
        for b in ns.layout.bundles:
            owner = ns.owners[b]
            if owner in rates and b not in ns.unowned:
                stats = fleet.bundle_stats(ns, b)
                rates[owner] += stats["msgRateIn"] + stats["msgRateOut"]
    # The leader's view of each broker's usage: its last load report, not updated by the
    # bundles it assigns now (those count as preallocated in the msg rates only).
    usage = {b: fleet.max_usage(c.name, b) for b in actives}
    moves: list[ShutdownMove] = []
    for ns, bundle in owned:
        _unload(model, ns, bundle)
        allowed = isolation_candidates(fleet.specs[c.name], ns.name, c.broker_count)
        candidates = [b for b in allowed if b in rates] or list(rates)
        destination: int | None = None
        if candidates:
            # removeMostServicingBrokersForNamespace: the fewest bundles of this namespace.
            per_ns = {b: 0 for b in candidates}
            for other in ns.layout.bundles:
                owner = ns.owners[other]
                if owner in per_ns and other not in ns.unowned and other != bundle:
                    per_ns[owner] += 1
            fewest = min(per_ns.values())
            evenly = [b for b in candidates if per_ns[b] == fewest]
            destination = _least_long_term_msg_rate(evenly, rates, usage)
            if usage[destination] > OVERLOAD_RATIO:
                # Its pick is overloaded: selectBrokerForAssignment selects again over every
                # broker the namespace policies allow.
                destination = _least_long_term_msg_rate(candidates, rates, usage)
            stats = fleet.bundle_stats(ns, bundle)
            rates[destination] += stats["msgRateIn"] + stats["msgRateOut"]
            ns.owners[bundle] = destination
        else:
            ns.unowned.add(bundle)
        moves.append(_record(model, c, ns, bundle, broker, destination, "modular"))
    return moves


def _least_long_term_msg_rate(
    candidates: list[int], rates: dict[int, float], usage: dict[int, float]
) -> int:
    """LeastLongTermMessageRate.selectBroker: the lowest msg rate in + out, a broker over
    85 % scoring infinity (ties: the lowest index; Pulsar picks at random among them)."""

    def score(b: int) -> tuple[float, int]:
        return (math.inf if usage[b] > OVERLOAD_RATIO else rates[b], b)

    return min(candidates, key=score)


def _extensible_cleanup(
    model: SimModel, c: ClusterState, broker: int, owned: list[tuple[NamespaceState, BundleRange]]
) -> list[ShutdownMove]:
    """ServiceUnitStateChannelImpl.doCleanup(broker, gracefully=true): every owned bundle
    transferred to LeastResourceUsageWithWeight's pick, on the load data last reported."""
    fleet = model.brokers
    actives = [b for b in range(c.broker_count) if b not in c.stopped]
    usage = {b: fleet.max_usage(c.name, b) for b in actives}
    rng = random.Random(f"{model.scenario.seed}/{c.name}/{broker}/{model.now_ms()}")
    moves: list[ShutdownMove] = []
    for ns, bundle in owned:
        _unload(model, ns, bundle)
        allowed = isolation_candidates(fleet.specs[c.name], ns.name, c.broker_count)
        candidates = [b for b in allowed if b in usage] or actives
        destination: int | None = None
        if candidates:
            average = sum(usage[b] for b in candidates) / len(candidates)
            best = [
                b for b in candidates if usage[b] + USAGE_DIFFERENCE_THRESHOLD <= average
            ] or candidates
            destination = best[rng.randrange(len(best))]
            ns.owners[bundle] = destination
        else:
            ns.unowned.add(bundle)  # no broker left: Free
        moves.append(_record(model, c, ns, bundle, broker, destination, "extensible"))
    return moves


def _record(
    model: SimModel,
    c: ClusterState,
    ns: NamespaceState,
    bundle: BundleRange,
    source: int,
    destination: int | None,
    load_manager: str,
) -> ShutdownMove:
    return ShutdownMove(
        time_ms=model.now_ms(),
        cluster=c.name,
        namespace=ns.name,
        bundle=bundle,
        source=source,
        destination=destination,
        load_manager=load_manager,
    )
