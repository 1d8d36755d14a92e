"""The client through the simulator's owner lookup (`balancer.sim.ownership`) and the routes
that redirect to the peer holding a namespace, as Pulsar's source answers them.

west has two brokers; its admin URL is broker 0 and broker 1 leads the load manager, so an
unowned bundle asked of broker 0 goes broker 0 -> leader -> broker 0?authoritative=true.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from balancer.core.bundles import BundleRange
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    PreconditionFailedError,
    PulsarPeerGroup,
    RequestRecord,
    RetryPolicy,
)
from balancer.sim import PeerGroup, RunningPeerGroup, load_scenario
from balancer.sim.ownership import lookup_candidate

SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "three-cluster-peers.yaml"
NS = "acme/west-ns"


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    scenario = load_scenario(SCENARIO)
    clusters = [
        c.model_copy(update={"brokers": 2, "leader_broker": 1}) if c.name == "west" else c
        for c in scenario.clusters
    ]
    broker = scenario.broker.model_copy(update={"redirect_to_owner": True})
    running = PeerGroup(
        scenario.model_copy(update={"clusters": clusters, "broker": broker})
    ).start()
    try:
        yield running
    finally:
        running.stop()


def _client(sim: RunningPeerGroup, records: list[RequestRecord]) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint(name, url) for name, url in sim.admin_urls.items()],
        ClientSettings(
            entry_cluster="east", retry=RetryPolicy(max_attempts=1), on_request=records.append
        ),
    )


def _bundle(
    sim: RunningPeerGroup, *, candidate: int | None = None, owner: int | None = None
) -> BundleRange:
    ns = sim.model.namespaces[NS]
    west = sim.model.clusters["west"]
    return next(
        b
        for b in ns.layout.bundles
        if (candidate is None or lookup_candidate(ns, west, b) == candidate)
        and (owner is None or ns.owners[b] == owner)
    )


def test_a_split_of_an_unowned_bundle_goes_through_the_leader_and_back(
    sim: RunningPeerGroup,
) -> None:
    bundle = _bundle(sim, candidate=0, owner=0)
    sim.release_bundle(NS, bundle)
    records: list[RequestRecord] = []
    with _client(sim, records) as client:
        client.split_bundle(NS, bundle, algorithm="range_equally_divide", cluster="west")
        assert client.owner_of(NS) is None  # no cluster was crossed
    assert [(r.cluster, r.status) for r in records if r.method == "PUT"] == [
        ("west", 307),
        ("west", 307),
        ("west", 204),
    ]
    assert sim.model.broker_requests("west", "split") == {0: 2, 1: 1}
    assert [s.parent for s in sim.splits(NS)] == [bundle]


def test_topic_hash_positions_follow_the_307_to_the_owner_broker(sim: RunningPeerGroup) -> None:
    bundle = _bundle(sim, owner=1)
    records: list[RequestRecord] = []
    with _client(sim, records) as client:
        positions = client.topic_hash_positions(NS, bundle, cluster="west")
    hash_calls = [r.status for r in records if r.path_template.endswith("/topicHashPositions")]
    assert positions.positions and hash_calls == [307, 200]
    assert sim.model.broker_requests("west", "topic_hash_positions") == {0: 1, 1: 1}


def test_topic_hash_positions_of_an_unowned_bundle_are_412(sim: RunningPeerGroup) -> None:
    bundle = _bundle(sim)
    sim.release_bundle(NS, bundle)
    with _client(sim, []) as client, pytest.raises(PreconditionFailedError) as info:
        client.topic_hash_positions(NS, bundle, cluster="west")
    assert "Failed to find ownership for ServiceUnit" in info.value.reason


def test_topic_stats_asked_of_a_peer_are_redirected_and_teach_the_owner(
    sim: RunningPeerGroup,
) -> None:
    records: list[RequestRecord] = []
    topic = sim.topics(NS)[0]
    with _client(sim, records) as client:
        client.topic_stats(topic)  # east (the entry) sends it to west
        assert client.owner_of(NS) == "west"
        client.internal_stats(topic)
    clusters = [(r.cluster, r.status) for r in records]
    assert clusters[0] == ("east", 307) and ("east", 307) not in clusters[1:]
