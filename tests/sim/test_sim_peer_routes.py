"""The simulator's peer-group answers that follow Pulsar's source for issue 33: multi-host
ClusterData service URLs, the broker -> leader -> broker owner lookup, stats redirected to
the peer, peers 204 and topicHashPositions' ownership checks."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from balancer.core.bundles import BundleRange
from balancer.sim import RunningPeerGroup, start_peer_group
from balancer.sim.ownership import lookup_candidate
from balancer.sim.scenarios import ScenarioError, parse_scenario


def scenario(**cluster_options: Any) -> dict[str, Any]:
    west = {"name": "west", "brokers": 2, "peers": ["east"], **cluster_options}
    return {
        "name": "peer-routes",
        "seed": 3,
        "clusters": [{"name": "east", "peers": ["west"]}, west, {"name": "south"}],
        "namespaces": [
            {
                "name": "acme/west-ns",
                "cluster": "west",
                "topic_groups": [{"name": "w", "count": 20}],
            },
        ],
    }


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


SPLIT = "/admin/v2/namespaces/acme/west-ns/0x00000000_0x40000000/split"


def test_a_multi_host_service_url_lists_every_broker_and_307s_name_each_in_turn(
    http: httpx.Client,
) -> None:
    with start_peer_group(parse_scenario(scenario(multi_host_service_url=True))) as group:
        east = group.admin_urls["east"]
        brokers = group.broker_urls["west"]
        hosts = ",".join(u.removeprefix("http://") for u in brokers)
        data = http.get(f"{east}/admin/v2/clusters/west").json()
        assert data["serviceUrl"] == f"http://{hosts}"
        locations = [
            http.put(f"{east}{SPLIT}?unload=false", json=[]).headers["location"] for _ in range(3)
        ]
        # PulsarWebResource.getRedirectionUrl: one host of the list, the request's path and
        # query; the simulator starts at the last broker and goes round.
        assert locations == [
            f"{b}{SPLIT}?unload=false" for b in (brokers[1], brokers[0], brokers[1])
        ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"leader_broker": 2}, "leader_broker 2"),
        ({"multi_host_service_url": True, "service_url_alias": True}, "exclude each other"),
    ],
)
def test_bad_cluster_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(scenario(**options))


def _candidate_of_broker(group: RunningPeerGroup, broker: int) -> BundleRange:
    """A west-ns bundle the leader would give to `broker` (the sim's lookup rule)."""
    ns = group.model.namespaces["acme/west-ns"]
    west = group.model.clusters["west"]
    return next(b for b in ns.layout.bundles if lookup_candidate(ns, west, b) == broker)


def test_an_unowned_bundle_goes_broker_leader_broker_with_authoritative(
    http: httpx.Client,
) -> None:
    """PulsarWebResource.validateBundleOwnership: broker 0 (not the leader) forwards to the
    leader with authoritative=false; the leader picks broker 0 and sends it back with
    authoritative=true; broker 0 then owns the bundle and splits it."""
    with start_peer_group(parse_scenario(scenario(leader_broker=1))) as group:
        x, leader = group.broker_urls["west"]
        bundle = _candidate_of_broker(group, 0)
        group.release_bundle("acme/west-ns", bundle)
        path = f"/admin/v2/namespaces/acme/west-ns/{bundle}/split"
        first = http.put(f"{x}{path}?unload=false", json=[])
        assert first.status_code == 307
        assert first.headers["location"] == f"{leader}{path}?unload=false&authoritative=false"
        second = http.put(first.headers["location"], json=[])
        assert second.status_code == 307
        assert second.headers["location"] == f"{x}{path}?unload=false&authoritative=true"
        assert group.splits() == []
        assert http.put(second.headers["location"], json=[]).status_code == 204
        assert [s.parent for s in group.splits()] == [bundle]
        assert group.model.broker_requests("west", "split") == {0: 2, 1: 1}


def test_the_leader_itself_takes_an_unowned_bundle_it_picks_for_itself(
    http: httpx.Client,
) -> None:
    with start_peer_group(parse_scenario(scenario(leader_broker=1))) as group:
        bundle = _candidate_of_broker(group, 1)
        group.release_bundle("acme/west-ns", bundle)
        path = f"/admin/v2/namespaces/acme/west-ns/{bundle}/unload"
        assert http.put(f"{group.broker_urls['west'][1]}{path}").status_code == 204


def test_topic_hash_positions_need_an_owner_in_the_cluster_asked(http: httpx.Client) -> None:
    """NamespacesBase.internalGetTopicHashPositionsAsync -> validateNamespaceBundleOwnershipAsync
    (readOnly): 412 when no broker of this cluster owns the bundle, 307 to the owner."""
    doc = scenario()
    doc["broker"] = {"redirect_to_owner": True}
    with start_peer_group(parse_scenario(doc)) as group:
        ns = group.model.namespaces["acme/west-ns"]
        bundle = ns.layout.bundles[0]
        owner = ns.owners[bundle]
        brokers = group.broker_urls["west"]
        path = f"/admin/v2/namespaces/acme/west-ns/{bundle}/topicHashPositions"
        moved = http.get(f"{brokers[1 - owner]}{path}")
        assert moved.status_code == 307
        assert moved.headers["location"].startswith(f"{brokers[owner]}{path}?authoritative=")
        assert http.get(moved.headers["location"]).status_code == 200
        for cluster in ("east", "south"):  # no broker of theirs owns it
            other = http.get(f"{group.admin_urls[cluster]}{path}")
            assert other.status_code == 412
            assert "Failed to find ownership for ServiceUnit" in other.json()["reason"]
        group.release_bundle("acme/west-ns", bundle)
        unowned = http.get(f"{brokers[0]}{path}")
        assert unowned.status_code == 412  # read-only: no broker takes it
        assert "Failed to find ownership for ServiceUnit" in unowned.json()["reason"]


@pytest.mark.parametrize("route", ["stats", "internalStats"])
def test_topic_stats_are_redirected_to_the_peer_holding_the_namespace(
    http: httpx.Client, route: str
) -> None:
    """PersistentTopicsBase.internalGetStatsAsync / internalGetInternalStatsAsync call
    validateGlobalNamespaceOwnershipAsync first; offload trigger and status do not."""
    with start_peer_group(parse_scenario(scenario())) as group:
        path = f"/admin/v2/persistent/acme/west-ns/w-0/{route}"
        r = http.get(f"{group.admin_urls['east']}{path}")
        assert r.status_code == 307
        assert r.headers["location"] == f"{group.admin_urls['west']}{path}"
        assert http.get(r.headers["location"]).status_code == 200
        assert http.get(f"{group.admin_urls['south']}{path}").status_code == 412  # no peer
        offload = http.get(
            f"{group.admin_urls['east']}/admin/v2/persistent/acme/west-ns/w-0/offload"
        )
        assert offload.status_code == 404 and "location" not in offload.headers


def test_peers_never_set_are_204_with_no_body(http: httpx.Client) -> None:
    """ClustersBase.getPeerClusterNames returns ClusterData.peerClusterNames: null when never
    set, which JAX-RS answers 204 with no body."""
    with start_peer_group(parse_scenario(scenario())) as group:
        peers = f"{group.admin_urls['south']}/admin/v2/clusters/south/peers"
        none = http.get(peers)
        assert (none.status_code, none.content) == (204, b"")
        assert http.post(peers, json=["east"]).status_code == 204
        assert http.get(peers).json() == ["east"]


def test_the_sim_s_multi_host_cluster_data_has_pulsar_s_shape(http: httpx.Client) -> None:
    """tests/fixtures/pulsar/cluster-data-multi-host.json: same keys and JSON types, the
    same `scheme://host:port,host:port` form."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "pulsar"
    real = json.loads((fixtures / "cluster-data-multi-host.json").read_text())
    with start_peer_group(parse_scenario(scenario(multi_host_service_url=True))) as group:
        data = http.get(f"{group.admin_urls['east']}/admin/v2/clusters/west").json()
    for key, value in data.items():
        assert key in real and type(value) is type(real[key]), key
    pattern = re.compile(r"^http://[^/,:]+:\d+(,[^/,:]+:\d+)+$")
    assert pattern.match(real["serviceUrl"]) and pattern.match(data["serviceUrl"])
