"""Peer-group routing (PIP-8) against the simulator's three-cluster scenario.

conf/scenarios/three-cluster-peers.yaml: east and west are peers of each other, south is no
one's peer. Only some routes redirect (split, unload): a split of a namespace held by a peer
is answered 307 to the same path on the peer's ClusterData service URL; the client follows it
with the same method and body and remembers the owner. Reads (bundles, topics, stats) are
answered by whichever cluster is asked, so the client sends them to the cluster the stats
came from and never learns an owner from them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from balancer.core.bundles import BundleRange
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    PreconditionFailedError,
    PulsarPeerGroup,
    RequestRecord,
    RetryPolicy,
    TooManyRedirectsError,
)
from balancer.pulsar.routing import routed_to
from balancer.sim import RunningPeerGroup, load_scenario, start_peer_group

SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "three-cluster-peers.yaml"
BUNDLES = "/admin/v2/namespaces/{tenant}/{namespace}/bundles"
SPLIT = "/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split"
SPEC = "specified_positions_divide"
FIRST = BundleRange(0, 0x40000000)
SECOND = BundleRange(0x40000000, 0x80000000)


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
        ClientSettings(
            entry_cluster=entry,
            retry=RetryPolicy(max_attempts=1),
            max_redirect_hops=max_redirect_hops,
            on_request=records.append if records is not None else None,
        ),
    )


def test_reads_go_to_the_cluster_named_and_teach_no_owner(sim: RunningPeerGroup) -> None:
    records: list[RequestRecord] = []
    with _client(sim, records=records) as client:
        layout = client.get_bundles("acme/west-ns", cluster="west")
        topics = client.topics_of_bundle("acme/west-ns", FIRST, cluster="west")
        client.topic_stats(topics[0], cluster="west")
        client.topic_hash_positions("acme/west-ns", FIRST, topics[:2], cluster="west")
        assert layout.num_bundles == 4 and topics
        assert {(r.cluster, r.status) for r in records} == {("west", 200)}
        assert client.owner_of("acme/west-ns") is None
    assert sim.model.requests(cluster="east") == 0


def test_get_bundles_is_not_redirected_and_a_stale_answer_teaches_nothing(
    sim: RunningPeerGroup,
) -> None:
    with _client(sim) as client:
        client.split_bundle(
            "acme/west-ns", FIRST, algorithm=SPEC, boundaries=[0x20000000], cluster="west"
        )
        # Asked of east (the entry), which never held the namespace: its own, stale, layout.
        stale = client.get_bundles("acme/west-ns")
        assert stale.num_bundles == 4 and stale.has(FIRST)
        assert client.owner_of("acme/west-ns") is None
        assert client.get_bundles("acme/west-ns", cluster="west").num_bundles == 5
    assert sim.model.requests(route="bundles", cluster="east") == 1


def test_a_split_follows_the_real_redirect_then_goes_straight_to_the_owner(
    sim: RunningPeerGroup,
) -> None:
    records: list[RequestRecord] = []
    with _client(sim, records=records) as client:
        client.split_bundle(
            "acme/west-ns", SECOND, algorithm=SPEC, boundaries=[0x50000000, 0x60000000], unload=True
        )
        assert [(r.cluster, r.status) for r in records] == [("east", 307), ("west", 204)]
        assert client.owner_of("acme/west-ns") == "west"
        records.clear()
        # The owner learnt from the redirect serves every later call of the namespace.
        client.split_bundle("acme/west-ns", FIRST, algorithm=SPEC, boundaries=[0x10000000])
        assert client.get_bundles("acme/west-ns").num_bundles == 7
        assert {r.cluster for r in records} == {"west"}
    first, second = sim.model.splits
    assert first.cluster == "west" and first.namespace == "acme/west-ns"
    assert first.boundaries == (0x50000000, 0x60000000) and first.unloaded is True
    assert second.boundaries == (0x10000000,)


def test_routed_to_sends_every_call_of_the_block_to_that_cluster(sim: RunningPeerGroup) -> None:
    with _client(sim) as client:
        with routed_to("west"):
            assert client.get_bundles("acme/west-ns").num_bundles == 4
            topics = client.topics_of_bundle("acme/west-ns", FIRST)
            client.internal_stats(topics[0])
        assert client.request_count(cluster="east") == 0
        assert client.request_count(cluster="west") == 3
        assert client.owner_of("acme/west-ns") is None


def test_a_namespace_on_no_peer_is_412_until_its_cluster_becomes_a_peer(
    sim: RunningPeerGroup,
) -> None:
    records: list[RequestRecord] = []
    with _client(sim, records=records) as client:
        with pytest.raises(PreconditionFailedError) as info:
            client.split_bundle("acme/south-ns", FIRST, algorithm=SPEC, boundaries=[1 << 28])
        assert info.value.cluster == "east" and "local_cluster=east" in info.value.reason
        assert client.owner_of("acme/south-ns") is None
        # PIP-8: make south a peer of east; the same call now crosses to the third cluster.
        client.set_peer_clusters("east", ["west", "south"])
        assert client.get_peer_clusters("east") == ("west", "south")
        client.split_bundle("acme/south-ns", FIRST, algorithm=SPEC, boundaries=[1 << 28])
        assert client.owner_of("acme/south-ns") == "south"
    visited = {r.cluster for r in records if r.path_template == SPLIT}
    assert visited == {"east", "south"}
    assert [s.cluster for s in sim.model.splits] == ["south"]


def test_no_redirect_is_followed_with_zero_hops(sim: RunningPeerGroup) -> None:
    with _client(sim, max_redirect_hops=0) as client:
        with pytest.raises(TooManyRedirectsError) as info:
            client.split_bundle("acme/west-ns", FIRST, algorithm=SPEC, boundaries=[1 << 28])
        assert info.value.visited == ("east",)
        assert client.owner_of("acme/west-ns") is None
    assert sim.model.requests(cluster="west") == 0 and sim.model.splits == []


def test_a_redirect_to_a_cluster_data_service_url_reaches_that_peer() -> None:
    """ClusterData serviceUrl differs from the configured admin URL (a second port)."""
    scenario = load_scenario(SCENARIO)
    aliased = scenario.model_copy(
        update={
            "clusters": [
                c.model_copy(update={"service_url_alias": True}) for c in scenario.clusters
            ]
        }
    )
    with start_peer_group(aliased) as sim:
        assert sim.model.clusters["west"].advertised_url != sim.admin_urls["west"]
        records: list[RequestRecord] = []
        with _client(sim, records=records) as client:
            client.split_bundle("acme/west-ns", FIRST, algorithm=SPEC, boundaries=[1 << 28])
            assert client.owner_of("acme/west-ns") == "west"
            splits = [(r.cluster, r.status) for r in records if r.path_template == SPLIT]
            assert splits == [("east", 307), ("west", 204)]
            # Then straight to west's configured admin URL: no 307 again, no loop.
            records.clear()
            client.split_bundle("acme/west-ns", SECOND, algorithm=SPEC, boundaries=[0x50000000])
            assert [(r.cluster, r.status) for r in records] == [("west", 204)]
        assert [s.cluster for s in sim.model.splits] == ["west", "west"]


def test_cluster_reads_fall_back_to_a_reachable_cluster_when_the_entry_is_down(
    sim: RunningPeerGroup,
) -> None:
    sim.stop_cluster("east")
    records: list[RequestRecord] = []
    with _client(sim, records=records) as client:
        assert client.list_clusters() == ("east", "south", "west")  # entry east: refused
        assert client.get_peer_clusters("east") == ("west",)  # east's own data, from a peer
        assert client.get_bundles("acme/west-ns", cluster="west").num_bundles == 4
    assert {r.cluster for r in records if r.status is None} == {"east"}
    assert [r.status for r in records if r.cluster != "east"] == [200, 200, 200]
    sim.start_cluster("east")
    with _client(sim) as client:
        assert client.list_clusters(via="east") == ("east", "south", "west")


def test_cluster_calls_go_to_the_named_cluster(sim: RunningPeerGroup) -> None:
    with _client(sim) as client:
        south = client.get_cluster("south")
        assert south.service_url == sim.admin_urls["south"] and south.peer_cluster_names == ()
        assert client.get_peer_clusters("west") == ("east",)
        assert client.request_count(cluster="south") == 1
        assert client.request_count(cluster="west") == 1
        assert client.list_clusters(via="south") == ("east", "south", "west")


@pytest.mark.parametrize(
    ("status", "body", "peers"),
    [(204, b"", ()), (200, b"", ()), (200, b"null", ()), (200, b'["b"]', ("b",))],
    ids=["204", "200-empty", "null", "one-peer"],
)
def test_peers_never_set_read_as_none(status: int, body: bytes, peers: tuple[str, ...]) -> None:
    """ClustersBase.getPeerClusterNames: a null entity, answered 204 with no body."""
    answer = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    with PulsarPeerGroup(
        [ClusterEndpoint("a", "http://a.example")], ClientSettings(http_transport=answer)
    ) as client:
        assert client.get_peer_clusters("a") == peers
