"""A rolling restart of 5 brokers of the simulator where each stopping broker is drained
first with the restart order (issue 43, point 4): the pure decision with the order's
destination tiers, carried out by the admin client's unloads with a destination (the path
`run` takes), then the broker stops (its shutdown finds nothing to hand on) and comes back
empty. Each bundle moves at most twice and the moves total at most (1 + 1/N) x bundles."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from balancer.core.broker_load import BrokerCapacity
from balancer.core.bundles import BundleRange
from balancer.core.moves.decide import decide_moves
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    MoveReason,
    MoveSettings,
    PlacementRules,
)
from balancer.core.rollout import drain_destinations
from balancer.pulsar import ClusterEndpoint, PulsarPeerGroup
from balancer.sim import parse_scenario, start_peer_group
from balancer.sim.broker_stops import statefulset_order
from balancer.sim.group import RunningPeerGroup

NS = "t/ns"
BROKERS = 5
CAP = BrokerCapacity(max_msg_rate=1000.0, max_throughput_bytes=1e12)
BUNDLE_RATE = 40.0  # each bundle 0.04 of a broker: the cluster at ~0.32


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    doc = {
        "name": "rolling-drain",
        "seed": 11,
        "clusters": [{"name": "a", "brokers": BROKERS}],
        "namespaces": [
            {
                "name": NS,
                "cluster": "a",
                "bundles": 40,
                "topic_groups": [{"name": "x", "count": 160, "total_msg_rate_in": 16000}],
            }
        ],
    }
    with start_peer_group(parse_scenario(doc)) as g:
        yield g


def _ids(g: RunningPeerGroup) -> list[str]:
    return [u.removeprefix("http://") for u in g.broker_urls["a"]]


def _owners(g: RunningPeerGroup) -> dict[str, str]:
    """bundle range -> its owner's id, once the clients' lookups after unloads are done."""
    ids = _ids(g)
    ns = g.model.namespaces[NS]
    g.clock.advance(30.0)  # past the clients' reconnect delay
    with g.model.lock:
        g.model.brokers.settle()
        assert not ns.unowned, "every bundle owned again"
        return {str(b): ids[ns.owners[b]] for b in ns.layout.bundles}


def _state(
    owners: dict[str, str], listed: list[str]
) -> tuple[list[BrokerState], list[BundleState]]:
    bundles = [
        BundleState(NS, BundleRange.parse(name), owner, msg_rate=BUNDLE_RATE, sessions=1, topics=1)
        for name, owner in sorted(owners.items())
    ]
    count = Counter(owners.values())
    brokers = [BrokerState(b, count[b] * BUNDLE_RATE / CAP.max_msg_rate, CAP) for b in listed]
    return brokers, bundles


def test_a_rolling_restart_drained_by_the_order_moves_each_bundle_at_most_twice(
    group: RunningPeerGroup,
) -> None:
    ids = _ids(group)
    order = tuple(ids[i] for i in statefulset_order(BROKERS))
    moved: Counter[str] = Counter()
    order_index = statefulset_order(BROKERS)
    with PulsarPeerGroup([ClusterEndpoint("a", group.admin_urls["a"])]) as admin:
        for index in statefulset_order(BROKERS):
            stopping = ids[index]
            for cycle in range(10):
                owners = _owners(group)
                if stopping not in owners.values():
                    break
                listed = list(admin.list_brokers("a"))
                brokers, bundles = _state(owners, listed)
                draining = frozenset({stopping})
                plan = decide_moves(
                    "a", brokers, bundles, rules=PlacementRules(), settings=MoveSettings(),
                    now_ms=cycle, window_end_ms=cycle, draining=draining,
                    drain_destinations=drain_destinations(order, listed, draining),
                )  # fmt: skip
                if index != order_index[0]:  # only the first drain lacks settled brokers
                    assert plan.drain_fallback == ()
                step = order.index(stopping)
                drained_to = {m.destination for m in plan.moves if m.reason is MoveReason.DRAIN}
                if step == 0:  # to the last to restart, then the next latest, and so on
                    latest = list(reversed(order[1:]))
                    assert drained_to == set(latest[: len(drained_to)])
                else:  # only to brokers that already restarted
                    assert drained_to <= set(order[:step])
                for move in plan.moves:
                    if move.reason is MoveReason.DRAIN:
                        admin.unload_bundle(NS, move.bundle, cluster="a",
                                            destination_broker=move.destination)  # fmt: skip
                        moved[str(move.bundle)] += 1
            assert stopping not in _owners(group).values()
            shutdown = group.stop_broker("a", index)
            assert shutdown == []  # Pulsar's shutdown finds it empty: no unplanned move
            group.start_broker("a", index)
    assert max(moved.values()) <= 2
    assert sum(moved.values()) <= (1 + 1 / BROKERS) * 40
    # The first broker's bundles went to the last one: those, and only those, moved twice.
    assert sum(moved.values()) > 40
