"""Bundle splits over real HTTP: every algorithm, LARGEST/HOT, the 404/412/307 answers,
no-op splits, unloads, and every applied split recorded exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.core.bundles import BundleRange
from balancer.core.hashing import hash_position
from balancer.core.split import SplitAlgorithm, SplitOptions, compute_split
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

NS = "acme/orders"
FIRST = "0x00000000_0x40000000"


def scenario(default_algorithm: str = "range_equally_divide") -> dict[str, Any]:
    return {
        "name": "split",
        "seed": 2,
        "broker": {"default_split_algorithm": default_algorithm},
        "clusters": [
            {"name": "east", "brokers": 2, "peers": ["west"]},
            {"name": "west", "peers": ["east"]},
        ],
        "namespaces": [
            {
                "name": NS,
                "cluster": "east",
                "bundles": 4,
                "topic_groups": [
                    {"name": "orders", "partitions": 16, "total_msg_rate_in": 16000},
                    {"name": "ev", "count": 40, "total_msg_rate_in": 400},
                ],
                "outstanding": [{"topic": "orders-partition-1", "msg_rate_in": 20000}],
            },
            {
                "name": "acme/lonely",
                "cluster": "east",
                "bundles": 2,
                "topic_groups": [{"name": "x"}],
            },
        ],
    }


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(scenario())) as running:
        yield running


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def split_url(group: RunningPeerGroup, bundle: str, ns: str = NS, cluster: str = "east") -> str:
    return f"{group.admin_urls[cluster]}/admin/v2/namespaces/{ns}/{bundle}/split"


def bundles(group: RunningPeerGroup, http: httpx.Client, ns: str = NS) -> list[str]:
    body = http.get(f"{group.admin_urls['east']}/admin/v2/namespaces/{ns}/bundles").json()
    b: list[str] = body["boundaries"]
    assert body["numBundles"] == len(b) - 1
    return b


def topic_hashes(group: RunningPeerGroup, http: httpx.Client, bundle: str) -> list[int]:
    names = http.get(
        f"{group.admin_urls['east']}/admin/v2/persistent/{NS}", params={"bundle": bundle}
    ).json()
    return sorted(hash_position(n) for n in names)


def test_default_algorithm_is_range_equally_divide(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.put(split_url(group, FIRST))
    assert r.status_code == 204
    assert bundles(group, http) == [
        "0x00000000",
        "0x20000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]
    [record] = group.splits(NS)
    assert group.splits("acme/lonely") == []
    assert group.bundles(NS).num_bundles == 5
    assert record.parent == BundleRange(0, 0x40000000)
    assert record.children == (BundleRange(0, 0x20000000), BundleRange(0x20000000, 0x40000000))
    assert record.algorithm == "range_equally_divide" and record.namespace == NS
    assert record.time_ms == group.clock.now_ms()


def test_topic_count_equally_divide_halves_the_topics(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    hashes = topic_hashes(group, http, FIRST)
    n = len(hashes)
    s, e = hashes[max(n // 2 - 1, 0)], hashes[n // 2]
    r = http.put(
        split_url(group, FIRST), params={"splitAlgorithmName": "topic_count_equally_divide"}
    )
    assert r.status_code == 204
    assert group.model.splits[-1].boundaries == (s + (e - s) // 2,)
    low = topic_hashes(group, http, f"0x00000000_0x{s + (e - s) // 2:08x}")
    assert len(low) == n // 2


def test_specified_positions_divide_uses_the_body(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.put(
        split_url(group, FIRST),
        params={"splitAlgorithmName": "specified_positions_divide"},
        json=[0x30000000, 0x10000000],
    )
    assert r.status_code == 204
    assert bundles(group, http)[:4] == ["0x00000000", "0x10000000", "0x30000000", "0x40000000"]
    assert len(group.model.splits[-1].children) == 3


def test_flow_or_qps_works_only_as_the_broker_default(http: httpx.Client) -> None:
    with start_peer_group(parse_scenario(scenario())) as group:
        r = http.put(
            split_url(group, FIRST), params={"splitAlgorithmName": "flow_or_qps_equally_divide"}
        )
        assert r.status_code == 412 and "default" in r.json()["reason"]
        assert group.model.splits == []
    with start_peer_group(parse_scenario(scenario("flow_or_qps_equally_divide"))) as group:
        hot = http.get(
            f"{group.admin_urls['east']}/lookup/v2/topic/persistent/{NS}/orders-partition-1/bundle"
        ).text
        parent = BundleRange.parse(hot)
        expected = compute_split(
            SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE,
            parent,
            group.model.topic_loads(group.model.namespaces[NS], parent),
            SplitOptions(),
        )
        assert expected.is_split
        r = http.put(
            split_url(group, hot), params={"splitAlgorithmName": "flow_or_qps_equally_divide"}
        )
        assert r.status_code == 204
        assert group.model.splits[-1].boundaries == expected.boundaries


@pytest.mark.parametrize(
    ("params", "body", "needle"),
    [
        ({"splitAlgorithmName": "no_such_algorithm"}, None, "Unsupported"),
        ({"splitAlgorithmName": "balanced_flow_divide"}, None, "Unsupported"),
        ({"splitAlgorithmName": "specified_positions_divide"}, None, "must not be empty"),
        ({"splitAlgorithmName": "specified_positions_divide"}, [], "must not be empty"),
        ({"splitAlgorithmName": "specified_positions_divide"}, [0x50000000], "not strictly inside"),
        ({"splitAlgorithmName": "specified_positions_divide"}, [0x40000000], "not strictly inside"),
        ({"splitAlgorithmName": "specified_positions_divide"}, [0], "not strictly inside"),
    ],
    ids=[
        "unknown-algorithm",
        "not-a-pulsar-algorithm",
        "positions-missing",
        "positions-empty",
        "position-in-another-bundle",
        "position-on-upper-bound",
        "position-on-lower-bound",
    ],
)
def test_precondition_failures_are_412_and_change_nothing(
    group: RunningPeerGroup,
    http: httpx.Client,
    params: dict[str, str],
    body: list[int] | None,
    needle: str,
) -> None:
    before = bundles(group, http)
    r = http.put(split_url(group, FIRST), params=params, json=body)
    assert r.status_code == 412
    assert needle in r.json()["reason"]
    assert bundles(group, http) == before and group.model.splits == []


@pytest.mark.parametrize(
    ("bundle", "ns", "status"),
    [
        ("0x00000000_0x20000000", NS, 412),
        (FIRST, "acme/nowhere", 404),
        ("garbage", NS, 412),
    ],
    ids=["unknown-bundle", "unknown-namespace", "malformed-bundle"],
)
def test_unknown_bundle_or_namespace(
    group: RunningPeerGroup, http: httpx.Client, bundle: str, ns: str, status: int
) -> None:
    """404 is a missing namespace only; a bundle not in the layout is 412 (Pulsar's
    PulsarWebResource.validateNamespaceBundleRange -> NamespaceBundles.validateBundle)."""
    assert http.put(split_url(group, bundle, ns)).status_code == status


@pytest.mark.parametrize(
    ("route", "method"),
    [("split", "PUT"), ("unload", "PUT"), ("topicHashPositions", "GET")],
)
@pytest.mark.parametrize(
    ("bundle", "reason"),
    [
        ("0x10000000_0x40000000", "Cannot find bundle in the bundles list"),
        ("0x00000000_0x20000000", "Invalid upper boundary for bundle"),
    ],
    ids=["unknown-lower", "wrong-upper"],
)
def test_a_bundle_not_in_the_layout_is_412_with_pulsars_reason(
    group: RunningPeerGroup, http: httpx.Client, route: str, method: str, bundle: str, reason: str
) -> None:
    base = f"{group.admin_urls['east']}/admin/v2/namespaces/{NS}/{bundle}/{route}"
    r = http.request(method, base)
    assert r.status_code == 412, r.text
    assert reason in r.json()["reason"]


def test_bad_body_is_400(group: RunningPeerGroup, http: httpx.Client) -> None:
    r = http.put(
        split_url(group, FIRST), content=b"[1, 2", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert http.put(split_url(group, FIRST), json=["0x10"]).status_code == 400


def test_the_parent_is_gone_after_a_split(group: RunningPeerGroup, http: httpx.Client) -> None:
    assert http.put(split_url(group, FIRST)).status_code == 204
    again = http.put(split_url(group, FIRST))  # the parent is stale: 412, never 404
    assert again.status_code == 412
    assert "Invalid upper boundary for bundle" in again.json()["reason"]
    assert len(group.model.splits) == 1


def test_largest_splits_the_bundle_with_most_topics(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    counts = {
        b: len(topic_hashes(group, http, b))
        for b in (
            "0x00000000_0x40000000",
            "0x40000000_0x80000000",
            "0x80000000_0xc0000000",
            "0xc0000000_0xffffffff",
        )
    }
    assert http.put(split_url(group, "LARGEST")).status_code == 204
    assert str(group.model.splits[-1].parent) == max(
        counts, key=lambda b: (counts[b], -int(b[:10], 16))
    )


def test_hot_splits_the_bundle_of_the_outstanding_partition(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    hot = http.get(
        f"{group.admin_urls['east']}/lookup/v2/topic/persistent/{NS}/orders-partition-1/bundle"
    ).text
    assert http.put(split_url(group, "HOT")).status_code == 204
    assert str(group.model.splits[-1].parent) == hot


def test_no_valid_boundary_is_a_204_no_op(group: RunningPeerGroup, http: httpx.Client) -> None:
    lonely = "acme/lonely"
    holder = http.get(
        f"{group.admin_urls['east']}/lookup/v2/topic/persistent/{lonely}/x/bundle"
    ).text
    bundle = BundleRange.parse(holder)
    r = http.put(
        split_url(group, holder, lonely),
        params={"splitAlgorithmName": "specified_positions_divide"},
        json=[bundle.lower + 1000],
    )
    assert r.status_code == 204
    assert group.model.splits == []
    assert [n.bundle for n in group.model.noop_splits] == [bundle]
    assert len(bundles(group, http, lonely)) == 3


def test_split_through_a_peer_redirect_is_applied_once(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.put(split_url(group, FIRST, cluster="west"), follow_redirects=False)
    assert r.status_code == 307
    assert group.model.splits == []
    r = http.put(split_url(group, FIRST, cluster="west"), follow_redirects=True)
    assert r.status_code == 204
    assert len(group.model.splits) == 1


def test_split_with_unload_moves_children_by_hash_and_unload_moves_a_bundle(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    ns = group.model.namespaces[NS]
    before = ns.owners[BundleRange(0, 0x40000000)]
    assert http.put(split_url(group, FIRST), params={"unload": "false"}).status_code == 204
    assert {ns.owners[c] for c in group.model.splits[-1].children} == {before}
    second = "0x40000000_0x80000000"
    assert http.put(split_url(group, second), params={"unload": "true"}).status_code == 204
    assert group.model.splits[-1].unloaded
    owner = ns.owners[BundleRange(0x80000000, 0xC0000000)]
    r = http.put(
        f"{group.admin_urls['east']}/admin/v2/namespaces/{NS}/0x80000000_0xc0000000/unload"
    )
    assert r.status_code == 204
    assert ns.owners[BundleRange(0x80000000, 0xC0000000)] == (owner + 1) % 2
    assert group.model.unloads[-1].from_broker == owner


def test_owner_redirect_mode_sends_bundle_and_topic_requests_to_the_owner(
    http: httpx.Client,
) -> None:
    doc = scenario()
    doc["broker"]["redirect_to_owner"] = True
    with start_peer_group(parse_scenario(doc)) as group:
        ns = group.model.namespaces[NS]
        owner = ns.owners[BundleRange(0, 0x40000000)]
        other = 1 - owner
        owner_url, other_url = group.broker_urls["east"][owner], group.broker_urls["east"][other]
        path = f"/admin/v2/namespaces/{NS}/{FIRST}/split"
        r = http.put(f"{other_url}{path}")
        assert r.status_code == 307
        # replaceQueryParam("authoritative", isLeaderBroker()): broker 0 leads by default.
        expected = "true" if other == 0 else "false"
        assert r.headers["location"] == f"{owner_url}{path}?authoritative={expected}"
        assert group.model.splits == []
        assert http.put(f"{other_url}{path}", follow_redirects=True).status_code == 204
        assert len(group.model.splits) == 1
        topic = "orders-partition-1"
        position = hash_position(f"persistent://{NS}/{topic}")
        holder = ns.owners[ns.layout.find(position)]
        stats_path = f"/admin/v2/persistent/{NS}/{topic}/stats"
        direct = http.get(f"{group.broker_urls['east'][holder]}{stats_path}")
        assert direct.status_code == 200
        moved = http.get(f"{group.broker_urls['east'][1 - holder]}{stats_path}")
        assert moved.status_code == 307
        assert moved.headers["location"].startswith(group.broker_urls["east"][holder])


PULSAR_2_10_DEFAULT = ["range_equally_divide", "topic_count_equally_divide"]


def test_supported_split_algorithms_default_to_pulsars_list(group: RunningPeerGroup) -> None:
    assert group.model.scenario.broker.supported_split_algorithms == (
        "range_equally_divide",
        "topic_count_equally_divide",
        "specified_positions_divide",
        "flow_or_qps_equally_divide",
    )


def test_an_algorithm_outside_the_supported_list_is_412_before_any_redirect(
    http: httpx.Client,
) -> None:
    doc = scenario()
    doc["broker"]["supported_split_algorithms"] = PULSAR_2_10_DEFAULT
    with start_peer_group(parse_scenario(doc)) as group:
        params = {"splitAlgorithmName": "specified_positions_divide"}
        for cluster in ("east", "west"):  # west would redirect: Pulsar checks the list first
            r = http.put(
                split_url(group, FIRST, cluster=cluster),
                params=params,
                json=[0x20000000],
                follow_redirects=False,
            )
            assert r.status_code == 412
            assert r.json()["reason"] == (
                "Unsupported namespace bundle split algorithm, supported algorithms are "
                "[range_equally_divide, topic_count_equally_divide]"
            )
        assert group.model.splits == []
        r = http.put(split_url(group, FIRST), params={"splitAlgorithmName": "range_equally_divide"})
        assert r.status_code == 204 and len(group.model.splits) == 1
        # No name: the broker default runs, whatever the list says.
        r = http.put(split_url(group, "0x80000000_0xc0000000"))
        assert r.status_code == 204 and len(group.model.splits) == 2
