"""The simulator's admin REST API over real HTTP: clusters, peers, tenants, namespaces,
bundles, topics of a bundle, lookups, hash positions, peer redirects and error bodies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.core.hashing import hash_position
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

SCENARIO: dict[str, Any] = {
    "name": "api",
    "seed": 1,
    "clusters": [
        {"name": "east", "brokers": 2, "peers": ["west"]},
        {"name": "west", "peers": ["east"]},
        {"name": "south"},
    ],
    "namespaces": [
        {
            "name": "acme/orders",
            "cluster": "east",
            "bundles": 4,
            "topic_buckets": 8,
            "topic_groups": [
                {"name": "orders", "partitions": 6, "total_msg_rate_in": 600},
                {"name": "ev", "count": 30, "total_msg_rate_in": 300, "zipf_exponent": 1.0},
            ],
        },
        {"name": "acme/west-ns", "cluster": "west", "topic_groups": [{"name": "w", "count": 3}]},
        {"name": "other/south-ns", "cluster": "south", "topic_groups": [{"name": "s"}]},
    ],
}


@pytest.fixture(scope="module")
def group() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def url(group: RunningPeerGroup, cluster: str, path: str) -> str:
    return f"{group.admin_urls[cluster]}{path}"


def test_each_cluster_listens_on_its_own_loopback_port(group: RunningPeerGroup) -> None:
    urls = [u for us in group.broker_urls.values() for u in us]
    assert len(urls) == 4 and len(set(urls)) == 4
    assert all(u.startswith("http://127.0.0.1:") for u in urls)
    assert {c: us[0] for c, us in group.broker_urls.items()} == group.admin_urls


def test_clusters_and_cluster_data(group: RunningPeerGroup, http: httpx.Client) -> None:
    assert http.get(url(group, "west", "/admin/v2/clusters")).json() == ["east", "south", "west"]
    data = http.get(url(group, "west", "/admin/v2/clusters/east")).json()
    assert data["serviceUrl"] == group.admin_urls["east"]
    assert data["peerClusterNames"] == ["west"]
    missing = http.get(url(group, "east", "/admin/v2/clusters/nowhere"))
    assert missing.status_code == 404 and "nowhere" in missing.json()["reason"]


def test_brokers_of_a_cluster_are_host_port(group: RunningPeerGroup, http: httpx.Client) -> None:
    brokers = http.get(url(group, "east", "/admin/v2/brokers/east")).json()
    assert brokers == [u.removeprefix("http://") for u in group.broker_urls["east"]]


def test_tenants_and_namespaces_come_from_the_shared_store(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    assert http.get(url(group, "east", "/admin/v2/tenants")).json() == ["acme", "other"]
    assert http.get(url(group, "east", "/admin/v2/tenants/acme")).json()["allowedClusters"] == [
        "east",
        "west",
    ]
    # Every cluster lists every namespace (NamespacesBase.internalGetTenantNamespaces).
    every = ["acme/orders", "acme/west-ns"]
    assert http.get(url(group, "east", "/admin/v2/namespaces/acme")).json() == every
    assert http.get(url(group, "west", "/admin/v2/namespaces/acme")).json() == every
    assert http.get(url(group, "east", "/admin/v2/namespaces/nobody")).status_code == 404


def test_bundles_json_is_pulsars(group: RunningPeerGroup, http: httpx.Client) -> None:
    body = http.get(url(group, "east", "/admin/v2/namespaces/acme/orders/bundles")).json()
    assert body == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }


def test_policies_carry_bundles_and_topic_buckets(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    policies = http.get(url(group, "east", "/admin/v2/namespaces/acme/orders")).json()
    assert policies["numberOfTopicBuckets"] == 8
    assert policies["replication_clusters"] == ["east"]
    assert policies["bundles"]["numBundles"] == 4


def test_topics_of_each_bundle_partition_the_namespace(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    every = http.get(url(group, "east", "/admin/v2/persistent/acme/orders")).json()
    assert len(every) == 36
    seen: list[str] = []
    for bundle in (
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ):
        names = http.get(
            url(group, "east", "/admin/v2/persistent/acme/orders"), params={"bundle": bundle}
        ).json()
        lower, upper = (int(x, 16) for x in bundle.split("_"))
        assert all(lower <= hash_position(n) < upper for n in names)
        seen += names
    assert sorted(seen) == sorted(every)


@pytest.mark.parametrize(
    "bundle", ["0x00000000_0x20000000", "not-a-bundle"], ids=["well-formed-but-absent", "malformed"]
)
def test_topics_of_unknown_bundle_is_an_empty_list(
    group: RunningPeerGroup, http: httpx.Client, bundle: str
) -> None:
    # PersistentTopicsBase.internalGetListAsync filters by range text: no match, no error.
    r = http.get(url(group, "east", "/admin/v2/persistent/acme/orders"), params={"bundle": bundle})
    assert r.status_code == 200
    assert r.json() == []


def test_lookup_bundle_is_plain_text(group: RunningPeerGroup, http: httpx.Client) -> None:
    topic = "persistent://acme/orders/orders-partition-2"
    r = http.get(
        url(group, "east", "/lookup/v2/topic/persistent/acme/orders/orders-partition-2/bundle")
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    position = hash_position(topic)
    lower, upper = (int(x, 16) for x in r.text.split("_"))
    assert lower <= position < upper


def test_topic_hash_positions_all_and_filtered(group: RunningPeerGroup, http: httpx.Client) -> None:
    bundle = "0x00000000_0x40000000"
    path = f"/admin/v2/namespaces/acme/orders/{bundle}/topicHashPositions"
    everything = http.get(url(group, "east", path)).json()
    assert everything["namespace"] == "acme/orders" and everything["bundle"] == bundle
    in_bundle = http.get(
        url(group, "east", "/admin/v2/persistent/acme/orders"), params={"bundle": bundle}
    ).json()
    assert everything["topicHashPositions"] == {n: hash_position(n) for n in in_bundle}
    # A partitioned base name expands to its partitions that fall in the bundle.
    base = http.get(
        url(group, "east", path), params={"topics": ["persistent://acme/orders/orders"]}
    ).json()["topicHashPositions"]
    expected = {
        f"persistent://acme/orders/orders-partition-{p}": hash_position(
            f"persistent://acme/orders/orders-partition-{p}"
        )
        for p in range(6)
    }
    assert base == {k: v for k, v in expected.items() if v < 0x40000000}


SPLIT_WEST = (
    "/admin/v2/namespaces/acme/west-ns/0x00000000_0x40000000/split"
    "?unload=false&splitAlgorithmName=range_equally_divide"
)


def test_a_split_of_a_namespace_on_a_peer_is_redirected_with_307(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.put(url(group, "east", SPLIT_WEST), json=[])
    assert r.status_code == 307
    assert r.headers["location"] == f"{group.admin_urls['west']}{SPLIT_WEST}"
    assert group.splits("acme/west-ns") == []  # nothing done on east's side


@pytest.mark.parametrize(
    "path",
    [
        "/admin/v2/namespaces/acme/west-ns/bundles",
        "/admin/v2/namespaces/acme/west-ns",
        "/admin/v2/namespaces/acme/west-ns/0x00000000_0x40000000/topicHashPositions",
        "/admin/v2/persistent/acme/west-ns?bundle=0x00000000_0x40000000",
        "/admin/v2/persistent/acme/west-ns/w-0/offload",
    ],
    ids=["bundles", "policies", "hash-positions", "topic-list", "offload-status"],
)
def test_reads_of_a_namespace_held_elsewhere_are_answered_locally(
    group: RunningPeerGroup, http: httpx.Client, path: str
) -> None:
    # Pulsar redirects only the routes that call validateGlobalNamespaceOwnershipAsync (a
    # topic's stats and internalStats do: tests/sim/test_sim_peer_routes.py).
    # topicHashPositions is 412 there: no broker of the cluster asked owns the bundle.
    for cluster in ("east", "south"):  # a peer of west, and a cluster with no peers
        r = http.get(url(group, cluster, path))
        assert r.status_code in (200, 404, 412), (cluster, r.status_code)
        assert "location" not in r.headers


def test_a_cluster_that_does_not_hold_the_namespace_answers_its_stale_layout(
    http: httpx.Client,
) -> None:
    with start_peer_group(parse_scenario(SCENARIO)) as fresh:
        assert http.put(url(fresh, "west", SPLIT_WEST), json=[]).status_code == 204
        on_west = http.get(url(fresh, "west", "/admin/v2/namespaces/acme/west-ns/bundles"))
        on_east = http.get(url(fresh, "east", "/admin/v2/namespaces/acme/west-ns/bundles"))
        assert on_west.json()["numBundles"] == 5
        assert on_east.status_code == 200 and on_east.json()["numBundles"] == 4
        topics = http.get(url(fresh, "east", "/admin/v2/persistent/acme/west-ns"))
        assert topics.json() == []
        offload = http.get(url(fresh, "east", "/admin/v2/persistent/acme/west-ns/w-0/offload"))
        assert offload.status_code == 404
        assert fresh.model.requests(route="bundles", cluster="east") == 1


def test_cluster_data_can_advertise_a_service_url_other_than_the_admin_url(
    http: httpx.Client,
) -> None:
    scenario = {
        **SCENARIO,
        "clusters": [
            {"name": "east", "peers": ["west"]},
            {"name": "west", "peers": ["east"], "service_url_alias": True},
            {"name": "south"},
        ],
    }
    with start_peer_group(parse_scenario(scenario)) as aliased:
        data = http.get(url(aliased, "east", "/admin/v2/clusters/west")).json()
        alias = data["serviceUrl"]
        assert alias.startswith("http://127.0.0.1:") and alias != aliased.admin_urls["west"]
        r = http.put(url(aliased, "east", SPLIT_WEST), json=[])
        assert r.status_code == 307 and r.headers["location"] == f"{alias}{SPLIT_WEST}"
        # The alias reaches the same cluster.
        assert http.put(r.headers["location"], json=[]).status_code == 204
        assert [s.cluster for s in aliased.splits("acme/west-ns")] == ["west"]


@pytest.mark.parametrize(
    ("cluster", "path", "status"),
    [
        ("east", "/admin/v2/namespaces/other/south-ns/0x00000000_0x40000000/split", 412),
        ("south", "/admin/v2/namespaces/acme/orders/0x00000000_0x40000000/split", 412),
        ("east", "/admin/v2/namespaces/acme/nowhere/bundles", 404),
        ("east", "/admin/v2/persistent/acme/orders/no-such-topic/stats", 404),
        ("east", "/admin/v2/no/such/route", 404),
    ],
    ids=["not-a-peer", "no-peers-at-all", "unknown-namespace", "unknown-topic", "unknown-route"],
)
def test_errors_have_pulsar_reason_bodies(
    group: RunningPeerGroup, http: httpx.Client, cluster: str, path: str, status: int
) -> None:
    send = http.put if path.endswith("/split") else http.get
    r = send(url(group, cluster, path))
    assert r.status_code == status
    assert isinstance(r.json()["reason"], str) and r.json()["reason"]


def test_peers_post_then_get(http: httpx.Client) -> None:
    with start_peer_group(parse_scenario(SCENARIO)) as group:
        peers = url(group, "south", "/admin/v2/clusters/south/peers")
        assert http.get(peers).status_code == 204  # never set: a null entity, no body
        assert http.post(peers, json=["east"]).status_code == 204
        assert http.get(peers).json() == ["east"]
        # south now redirects a split to its new peer.
        split = "/admin/v2/namespaces/acme/orders/0x00000000_0x40000000/split"
        r = http.put(url(group, "south", split), json=[])
        assert r.status_code == 307
        assert http.post(peers, json=["south"]).status_code == 412
        assert http.post(peers, json=["mars"]).status_code == 412
        assert http.post(peers, json={"not": "a list"}).status_code == 400


def test_metadata_path_debug_endpoint_uses_topic_buckets(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    from balancer.core.buckets import topic_bucket

    body = http.get(
        url(group, "east", "/sim/v1/metadata-path/persistent/acme/orders/orders-partition-1")
    ).json()
    bucket = topic_bucket("persistent://acme/orders/orders-partition-1", 8)
    assert body["bucket"] == bucket
    assert body["path"] == f"/managed-ledgers/acme/orders/persistent/${bucket}/orders-partition-1"
    plain = http.get(url(group, "west", "/sim/v1/metadata-path/persistent/acme/west-ns/w-1")).json()
    assert plain["bucket"] is None
    assert plain["path"] == "/managed-ledgers/acme/west-ns/persistent/w-1"


def test_requests_are_counted_per_cluster_and_route(http: httpx.Client) -> None:
    with start_peer_group(parse_scenario(SCENARIO)) as group:
        for _ in range(3):
            http.get(url(group, "east", "/admin/v2/namespaces/acme/orders/bundles"))
        http.get(url(group, "west", "/admin/v2/clusters"))
        assert group.model.requests(route="bundles", cluster="east") == 3
        assert group.model.requests(route="bundles") == 3
        assert group.model.requests(cluster="west") == 1


@pytest.mark.parametrize(
    ("length", "status"),
    [("abc", 400), ("-5", 400), (str(64 * 1024 * 1024), 413)],
    ids=["not-a-number", "negative", "too-large"],
)
def test_bad_content_length_is_answered_not_crashed(
    group: RunningPeerGroup, length: str, status: int
) -> None:
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(group.admin_urls["east"])
    with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
        sock.sendall(
            b"PUT /admin/v2/clusters/east/peers HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {length}\r\n\r\n".encode()
        )
        chunks = []
        while chunk := sock.recv(4096):  # the server closes the connection after answering
            chunks.append(chunk)
        reply = b"".join(chunks).decode()
    assert reply.startswith(f"HTTP/1.1 {status} ")
    assert '"reason"' in reply
    # The server still answers afterwards.
    assert httpx.get(url(group, "east", "/admin/v2/clusters")).status_code == 200
