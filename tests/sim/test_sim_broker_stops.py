"""A broker that stops, one that joins, and a rolling restart in StatefulSet order (issue 43,
point 6), as Pulsar's source does them (`balancer.sim.broker_stops` names the classes)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.sim import parse_scenario, start_peer_group
from balancer.sim.broker_stops import statefulset_order
from balancer.sim.group import RunningPeerGroup

NS = "t/ns"
HOT = "t/hot"


def scenario(*, brokers: int = 4, load_manager: str = "modular", **cluster: Any) -> dict[str, Any]:
    """One cluster of `brokers` brokers, namespace NS of 16 bundles spread by the hash."""
    return {
        "name": "stops",
        "seed": 5,
        "clusters": [{"name": "a", "brokers": brokers, "load_manager": load_manager, **cluster}],
        "namespaces": [
            {
                "name": NS,
                "cluster": "a",
                "bundles": 16,
                "topic_groups": [{"name": "x", "count": 64, "total_msg_rate_in": 6400}],
            }
        ],
    }


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    doc = getattr(request, "param", None) or scenario()
    with start_peer_group(parse_scenario(doc)) as g:
        yield g


def owners(g: RunningPeerGroup, namespace: str = NS) -> dict[str, int | None]:
    ns = g.model.namespaces[namespace]
    with g.model.lock:
        return {str(b): (None if b in ns.unowned else ns.owners[b]) for b in ns.layout.bundles}


def listed(g: RunningPeerGroup) -> list[str]:
    return httpx.get(f"{g.broker_urls['a'][1]}/admin/v2/brokers/a", timeout=10).json()


def test_a_stopping_broker_unloads_every_bundle_and_the_leader_places_each(
    group: RunningPeerGroup,
) -> None:
    """Modular: BrokerService.unloadNamespaceBundlesGracefully unloads every bundle it owns;
    the clients' lookups reach the leader, whose selectBrokerForAssignment keeps the active
    brokers with the fewest bundles of the namespace, then the least message rate."""
    before = owners(group)
    mine = sorted(b for b, o in before.items() if o == 2)
    assert mine, "the scenario gives broker 2 bundles"
    counts = Counter(o for o in before.values() if o != 2)
    moves = group.stop_broker("a", 2)
    after = owners(group)
    assert all(o is not None and o != 2 for o in after.values()), after
    assert sorted(str(m.bundle) for m in moves) == mine
    for move in moves:  # each lands where the namespace has fewest bundles at that moment
        assert move.source == 2 and move.load_manager == "modular"
        assert move.destination is not None
        assert counts[move.destination] == min(counts[b] for b in (0, 1, 3)), (move, counts)
        counts[move.destination] += 1
    assert group.model.cluster("a").shutdown_moves == moves


def test_a_restarted_broker_takes_the_next_stopping_brokers_bundles(
    group: RunningPeerGroup,
) -> None:
    """A broker that comes back owns nothing; the modular leader's "distribute bundles
    evenly" filter (removeMostServicingBrokersForNamespace) sends it every bundle of the next
    broker to stop until it has as many of the namespace as the others."""
    group.stop_broker("a", 3)
    group.start_broker("a", 3)
    assert 3 not in owners(group).values()
    moves = group.stop_broker("a", 2)
    others = Counter(o for o in owners(group).values())
    first = moves[: min(others[0], others[1])]
    assert first and all(m.destination == 3 for m in first), moves


@pytest.mark.parametrize(
    "group",
    [
        {
            **scenario(idle_brokers=[3], broker_capacity={"nic_limit_mbit": 50}),
            "namespaces": [
                {
                    "name": NS,
                    "cluster": "a",
                    "bundles": 16,
                    "topic_groups": [{"name": "x", "count": 32, "total_msg_rate_in": 320}],
                },
                {
                    "name": HOT,
                    "cluster": "a",
                    "bundles": 4,
                    "owner_broker": 3,
                    "topic_groups": [{"name": "h", "count": 8, "total_msg_rate_in": 6000}],
                },
            ],
        }
    ],
    indirect=True,
)
def test_the_modular_leader_places_nothing_on_an_overloaded_broker(
    group: RunningPeerGroup,
) -> None:
    """Broker 3 has the fewest bundles of NS (none) but is over 85 % (the hot namespace):
    LeastLongTermMessageRate scores it infinite and selectBrokerForAssignment, finding its
    pick overloaded, selects again over every allowed broker."""
    moves = group.stop_broker("a", 2)
    assert moves and all(m.destination in (0, 1) for m in moves), moves


@pytest.mark.parametrize(
    "group",
    [
        {
            **scenario(load_manager="extensible", broker_capacity={"nic_limit_mbit": 50}),
            "namespaces": [
                {
                    "name": NS,
                    "cluster": "a",
                    "bundles": 8,
                    "owner_broker": 1,
                    "topic_groups": [{"name": "x", "count": 16, "total_msg_rate_in": 160}],
                },
                {
                    "name": HOT,
                    "cluster": "a",
                    "bundles": 4,
                    "owner_broker": 0,
                    "topic_groups": [{"name": "h", "count": 8, "total_msg_rate_in": 5000}],
                },
            ],
        }
    ],
    indirect=True,
)
def test_an_extensible_broker_transfers_its_bundles_to_the_less_loaded_brokers(
    group: RunningPeerGroup,
) -> None:
    """Extensible: disableBroker -> ServiceUnitStateChannelImpl.cleanOwnerships overrides
    every owned bundle to a broker LeastResourceUsageWithWeight picks: one whose load is at
    least 10 points under the candidates' average (broker 0 carries the hot namespace)."""
    moves = group.stop_broker("a", 1)
    assert len(moves) == 8
    after = owners(group)
    assert set(after.values()) <= {2, 3}, after  # owned at once: a transfer, never broker 0
    assert all(m.load_manager == "extensible" for m in moves)


def test_stopping_the_leader_hands_the_leadership_over(group: RunningPeerGroup) -> None:
    """The leader's election lock goes with it (LeaderElectionService closes); the next
    broker leads, and the destinations the old leader kept in memory are gone with it."""
    c = group.model.cluster("a")
    c.affinity["0x00000000_0x10000000"] = 1
    moves = group.stop_broker("a", 0)
    assert c.leader == 1 and c.affinity == {}
    answer = httpx.get(f"{group.broker_urls['a'][1]}/admin/v2/brokers/leaderBroker", timeout=10)
    assert answer.json()["brokerId"] == group.broker_urls["a"][1].removeprefix("http://")
    assert all(m.destination in (1, 2, 3) for m in moves)
    assert 0 not in owners(group).values()


def test_a_killed_broker_leaves_its_bundles_unowned(group: RunningPeerGroup) -> None:
    """kill -9, OOM or a lost node: no shutdown ran; the bundles are owned by nobody until a
    lookup places them (the ownership nodes are ephemeral)."""
    mine = {b for b, o in owners(group).items() if o == 2}
    assert group.stop_broker("a", 2, graceful=False) == []
    assert {b for b, o in owners(group).items() if o is None} == mine


def test_a_broker_that_joins_is_listed_and_owns_nothing(group: RunningPeerGroup) -> None:
    gone = group.broker_urls["a"][2].removeprefix("http://")
    group.stop_broker("a", 2)
    assert gone not in listed(group)
    group.start_broker("a", 2)
    assert gone in listed(group)
    answer = httpx.get(f"http://{gone}/admin/v2/brokers/a/{gone}/ownedNamespaces", timeout=10)
    assert answer.status_code == 200
    # Only its own heartbeat namespace (NamespaceService.registerBootstrapNamespaces).
    assert [k for k in answer.json() if not k.startswith(f"pulsar/a/{gone}/")] == []
    with pytest.raises(ValueError, match="not stopped"):
        group.start_broker("a", 2)


def test_statefulset_order_is_highest_ordinal_first() -> None:
    assert statefulset_order(5) == [4, 3, 2, 1, 0]


def test_a_rolling_restart_stops_and_starts_each_broker_in_order(
    group: RunningPeerGroup,
) -> None:
    steps = group.rolling_restart("a")
    assert [s.broker for s in steps] == [3, 2, 1, 0]
    c = group.model.cluster("a")
    assert c.stopped == set() and len(listed(group)) == 4
    assert all(m.source == s.broker for s in steps for m in s.moves)
    # Every bundle the last broker (0) owned moved when it stopped; no bundle is unowned.
    assert all(o is not None for o in owners(group).values())
    assert c.leader != 0  # the leader restarted last and handed over
    moved = Counter(str(m.bundle) for s in steps for m in s.moves)
    assert sum(moved.values()) >= 16  # every bundle moved at least once
