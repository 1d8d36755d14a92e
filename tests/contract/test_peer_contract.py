"""Pulsar's peer-cluster contract (pulsar-contract.md, "Peer clusters", PIP-8): the peers
list, and which routes answer 307 to the peer holding a namespace.

The redirect rules need a peer group: they run on the simulated one (east <-> west, south
without peers) and are skipped on a single real cluster, with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from tests.contract.targets import ContractTarget

pytestmark = pytest.mark.pulsar_contract

WEST_NS = "contract/west-a"  # held by west; east is its peer, south is not
FIRST = "0x00000000_0x40000000"
SPLIT = f"/{FIRST}/split?unload=false&splitAlgorithmName=range_equally_divide"


def peerless_cluster(target: ContractTarget) -> str:
    """A cluster with no peers ever set: the sim's south, or the real cluster itself."""
    if target.sim is not None:
        return "south"
    data = target.request("GET", f"/admin/v2/clusters/{target.cluster}").json()
    if data.get("peerClusterNames"):
        pytest.skip(f"cluster {target.cluster} has peers: no peerless cluster to ask")
    return target.cluster


def test_peers_of_a_cluster_without_peers_is_empty(target: ContractTarget) -> None:
    cluster = peerless_cluster(target)
    r = target.request("GET", f"/admin/v2/clusters/{cluster}/peers")
    # A null entity is 204 with no body (JAX-RS); an older broker may answer [].
    if r.status_code == 204:
        assert not r.content.strip()
    else:
        assert (r.status_code, r.json()) == (200, [])


def test_client_reads_no_peers_as_an_empty_tuple(target: ContractTarget) -> None:
    cluster = peerless_cluster(target)
    with target.client() as client:
        assert client.get_peer_clusters(cluster) == ()


def service_url(target: ContractTarget, cluster: str) -> str:
    data = target.request("GET", f"/admin/v2/clusters/{cluster}").json()
    return str(data["serviceUrl"])


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("PUT", SPLIT),
        ("PUT", f"/{FIRST}/unload"),
    ],
    ids=["split", "unload"],
)
def test_bundle_writes_on_a_peer_are_307_to_its_service_url(
    peer_group: ContractTarget, method: str, suffix: str
) -> None:
    path = f"/admin/v2/namespaces/{WEST_NS}{suffix}"
    r = peer_group.request(method, path, follow=False, json=[])
    assert r.status_code == 307, r.text
    # The Location keeps path and query and takes the peer's ClusterData serviceUrl.
    assert r.headers["location"] == f"{service_url(peer_group, 'west')}{path}"


@pytest.mark.parametrize("suffix", ["stats", "internalStats"])
def test_topic_stats_on_a_peer_are_307(peer_group: ContractTarget, suffix: str) -> None:
    # PersistentTopicsBase.internalGetStatsAsync / internalGetInternalStatsAsync call
    # validateGlobalNamespaceOwnershipAsync first.
    path = f"/admin/v2/persistent/{WEST_NS}/t-0/{suffix}"
    r = peer_group.request("GET", path, follow=False)
    assert r.status_code == 307, (r.status_code, r.text)
    assert r.headers["location"] == f"{service_url(peer_group, 'west')}{path}"


@pytest.mark.parametrize(
    "path",
    [
        f"/admin/v2/namespaces/{WEST_NS}/bundles",
        f"/admin/v2/persistent/{WEST_NS}?bundle={FIRST}",
        f"/admin/v2/persistent/{WEST_NS}/t-0/offload",
    ],
    ids=["bundles", "topic-list", "offload-status"],
)
def test_reads_answered_locally_never_redirect_to_a_peer(
    peer_group: ContractTarget, path: str
) -> None:
    r = peer_group.request("GET", path, follow=False)
    assert r.status_code in (200, 404), (r.status_code, r.text)
    assert "location" not in r.headers


def test_a_split_asked_of_a_cluster_that_is_no_peer_is_412(peer_group: ContractTarget) -> None:
    # checkLocalOrGetPeerReplicationCluster: no peer in the replication clusters -> 412.
    assert peer_group.sim is not None
    south = peer_group.sim.admin_urls["south"]
    r = peer_group.http.put(f"{south}/admin/v2/namespaces/{WEST_NS}{SPLIT}", json=[])
    assert r.status_code == 412, r.text


@pytest.fixture
def peer_client(peer_group: ContractTarget) -> Iterator[PulsarPeerGroup]:
    from balancer.pulsar.auth import TokenSource

    assert peer_group.sim is not None and peer_group.token_file is not None
    settings = ClientSettings(
        token=TokenSource(file=peer_group.token_file),
        retry=RetryPolicy(max_attempts=1, base_delay_s=0, max_delay_s=0),
        sleep=lambda s: None,
        entry_cluster="east",
    )
    urls = peer_group.sim.admin_urls
    with PulsarPeerGroup([ClusterEndpoint(c, urls[c]) for c in ("east", "west")], settings) as c:
        yield c


def test_client_follows_a_split_to_the_peer_and_learns_the_owner(
    peer_group: ContractTarget, peer_client: PulsarPeerGroup
) -> None:
    ns = "contract/west-b"
    peer_client.split_bundle(ns, FIRST, algorithm="range_equally_divide", cluster="east")
    assert peer_group.sim is not None
    assert [s.cluster for s in peer_group.sim.splits(ns)] == ["west"]
    assert peer_client.owner_of(ns) == "west"
