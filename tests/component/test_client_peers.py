"""Peer-group routing (PIP-8) against the simulator's three-cluster scenario.

conf/scenarios/three-cluster-peers.yaml: east and west are peers of each other, south is no
one's peer. A request for a namespace held by a peer is answered 307 to the same path on the
peer; the client follows it with the same method and body and remembers the owner.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from balancer.bundles import BundleRange
from balancer.pulsar import (
    ClusterEndpoint,
    PreconditionFailedError,
    PulsarPeerGroup,
    RequestRecord,
    RetryPolicy,
    TooManyRedirectsError,
)
from balancer.sim import RunningPeerGroup, start_peer_group

SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "three-cluster-peers.yaml"
BUNDLES = "/admin/v2/namespaces/{tenant}/{namespace}/bundles"
SPLIT = "/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split"


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(SCENARIO) as running:
        yield running


def _client(
    sim: RunningPeerGroup,
    *,
    entry: str = "east",
    records: list[RequestRecord] | None = None,
    max_redirect_hops: int = 3,
) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        {name: ClusterEndpoint(name, url) for name, url in sim.admin_urls.items()},
        entry_cluster=entry,
        retry=RetryPolicy(max_attempts=1),
        max_redirect_hops=max_redirect_hops,
        on_request=records.append if records is not None else None,
    )


def test_the_owner_is_reached_through_a_307_then_directly(sim: RunningPeerGroup) -> None:
    records: list[RequestRecord] = []
    with _client(sim, records=records) as client:
        assert client.owner_of("acme/west-ns") is None
        first = client.get_bundles("acme/west-ns")
        assert client.owner_of("acme/west-ns") == "west"
        assert [(r.cluster, r.status) for r in records] == [("east", 307), ("west", 200)]
        second = client.get_bundles("acme/west-ns")
        assert first == second
        # The second call went straight to west: east was asked once in all.
        assert client.request_count(cluster="east") == 1
        assert client.request_count(cluster="west", path_template=BUNDLES) == 2
    assert sim.model.requests(route="bundles", cluster="east") == 1
    assert sim.model.requests(route="bundles", cluster="west") == 2


def test_the_owner_learnt_from_one_call_serves_every_call_of_the_namespace(
    sim: RunningPeerGroup,
) -> None:
    with _client(sim) as client:
        topics = client.topics_of_bundle("acme/west-ns", BundleRange(0, 0x40000000))
        client.reset_request_counts()
        client.topic_stats(topics[0])
        client.internal_stats(topics[0])
        client.lookup_bundle(topics[0])
        client.topic_hash_positions("acme/west-ns", BundleRange(0, 0x40000000), topics[:2])
        assert client.request_count(cluster="east") == 0
        assert client.request_count(cluster="west") == 4


def test_a_redirected_split_keeps_its_method_and_body(sim: RunningPeerGroup) -> None:
    with _client(sim) as client:
        client.split_bundle(
            "acme/west-ns",
            BundleRange(0x40000000, 0x80000000),
            algorithm="specified_positions_divide",
            boundaries=[0x50000000, 0x60000000],
            unload=True,
        )
        assert client.request_count(cluster="east", method="PUT", path_template=SPLIT) == 1
        assert client.request_count(cluster="west", method="PUT", path_template=SPLIT) == 1
    (record,) = sim.model.splits
    assert record.cluster == "west" and record.namespace == "acme/west-ns"
    assert record.boundaries == (0x50000000, 0x60000000) and record.unloaded is True


def test_redirects_work_from_either_peer(sim: RunningPeerGroup) -> None:
    with _client(sim, entry="west") as client:
        assert client.get_bundles("acme/east-ns").num_bundles == 4
        assert client.owner_of("acme/east-ns") == "east"
        assert client.get_bundles("acme/west-ns").num_bundles == 4
        assert client.owner_of("acme/west-ns") == "west"
        assert client.request_count(cluster="west") == 2 and client.request_count() == 3


def test_a_namespace_on_no_peer_is_412_until_its_cluster_becomes_a_peer(
    sim: RunningPeerGroup,
) -> None:
    records: list[RequestRecord] = []
    with _client(sim, records=records) as client:
        with pytest.raises(PreconditionFailedError) as info:
            client.get_bundles("acme/south-ns")
        assert info.value.cluster == "east" and "local_cluster=east" in info.value.reason
        assert client.owner_of("acme/south-ns") is None
        # PIP-8: make south a peer of east; the same call now crosses to the third cluster.
        client.set_peer_clusters("east", ["west", "south"])
        assert client.get_peer_clusters("east") == ("west", "south")
        assert client.get_bundles("acme/south-ns").num_bundles == 4
        assert client.owner_of("acme/south-ns") == "south"
        client.get_bundles("acme/west-ns")
    visited = {r.cluster for r in records if r.path_template == BUNDLES}
    assert visited == {"east", "west", "south"}


def test_no_redirect_is_followed_with_zero_hops(sim: RunningPeerGroup) -> None:
    with _client(sim, max_redirect_hops=0) as client:
        with pytest.raises(TooManyRedirectsError) as info:
            client.get_bundles("acme/west-ns")
        assert info.value.visited == ("east",)
        assert client.owner_of("acme/west-ns") is None
        assert client.get_bundles("acme/east-ns").num_bundles == 4  # no redirect needed
    assert sim.model.requests(cluster="west") == 0


def test_cluster_calls_go_to_the_named_cluster(sim: RunningPeerGroup) -> None:
    with _client(sim) as client:
        south = client.get_cluster("south")
        assert south.service_url == sim.admin_urls["south"] and south.peer_cluster_names == ()
        assert client.get_peer_clusters("west") == ("east",)
        assert client.request_count(cluster="south") == 1
        assert client.request_count(cluster="west") == 1
        assert client.list_clusters(via="south") == ("east", "south", "west")
