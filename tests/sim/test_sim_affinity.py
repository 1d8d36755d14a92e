"""The simulator keeps ModularLoadManagerImpl's bundleBrokerAffinityMap as Pulsar's releases
without apache/pulsar PR #25518 do (issue 41, point 1): keyed by the bare bundle range, written
before the namespace and bundle checks, used up by the next lookup of ANY unowned bundle with
that range in the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.sim import parse_scenario, start_peer_group
from balancer.sim.group import RunningPeerGroup

FIRST = "0x00000000_0x40000000"


def two_namespaces(**cluster: Any) -> dict[str, Any]:
    """Cluster `a` of three brokers, namespaces t/one and t/two of four bundles each (the
    same four ranges)."""
    return {
        "name": "affinity",
        "seed": 5,
        "clusters": [{"name": "a", "brokers": 3, **cluster}],
        "namespaces": [
            {
                "name": name,
                "cluster": "a",
                "bundles": 4,
                "topic_groups": [{"name": "x", "count": 20, "total_msg_rate_in": 2000}],
            }
            for name in ("t/one", "t/two")
        ],
    }


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    doc = getattr(request, "param", None) or two_namespaces()
    with start_peer_group(parse_scenario(doc)) as g:
        yield g


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, timeout=10) as c:
        yield c


def ids(g: RunningPeerGroup) -> list[str]:
    return [u.removeprefix("http://") for u in g.broker_urls["a"]]


def owner(g: RunningPeerGroup, ns: str, bundle: str = FIRST) -> int | None:
    state = g.model.namespaces[ns]
    with g.model.lock:
        g.model.brokers.settle()
        chosen = next(b for b in state.layout.bundles if str(b) == bundle)
        return None if chosen in state.unowned else state.owners[chosen]


def unload(
    http: httpx.Client, url: str, ns: str, destination: str, bundle: str = FIRST
) -> httpx.Response:
    return http.put(
        f"{url}/admin/v2/namespaces/{ns}/{bundle}/unload",
        params={"destinationBroker": destination},
    )


def other_than(*brokers: int | None) -> int:
    return next(b for b in range(3) if b not in brokers)


def test_two_moves_of_one_range_overwrite_each_others_destination(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    one, two = owner(group, "t/one"), owner(group, "t/two")
    to_one = other_than(one)
    to_two = other_than(two, to_one)
    url = group.admin_urls["a"]
    assert unload(http, url, "t/one", ids(group)[to_one]).status_code == 204
    assert unload(http, url, "t/two", ids(group)[to_two]).status_code == 204
    assert group.model.cluster("a").affinity == {FIRST: to_two}  # one entry for the range
    group.clock.advance(1)
    # The first bundle's lookup takes the second move's destination; the second finds none.
    assert owner(group, "t/one") == to_two
    first, second = group.model.brokers.moves
    assert first.outcome == "landed_elsewhere"
    assert second.landed is not None
    assert group.model.cluster("a").affinity == {}


def test_a_refused_unload_leaves_an_entry_the_next_same_range_lookup_uses(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    url = group.admin_urls["a"]
    two = owner(group, "t/two")
    leftover = other_than(two)
    # 404 (namespace) and 412 (bundle) come after the leader kept the destination.
    assert unload(http, url, "t/missing", ids(group)[leftover]).status_code == 404
    assert group.model.cluster("a").affinity == {FIRST: leftover}
    r = unload(http, url, "t/one", ids(group)[leftover], bundle="0x00000000_0x00000001")
    assert r.status_code == 412
    assert group.model.cluster("a").affinity[FIRST] == leftover
    # Another namespace's bundle with that range, unowned (its broker restarted), is placed
    # by the leftover on its next lookup, whatever the placement rules say.
    group.release_bundle("t/two", FIRST)
    r = http.get(
        f"{url}/admin/v2/namespaces/t/two/{FIRST}/topicHashPositions", follow_redirects=True
    )
    assert r.status_code == 412  # a read never assigns
    r = http.put(
        f"{url}/admin/v2/namespaces/t/two/{FIRST}/split",
        params={"splitAlgorithmName": "range_equally_divide"},
        follow_redirects=True,
    )
    assert r.status_code == 204
    children = group.splits("t/two")[0].children
    assert {group.model.namespaces["t/two"].owners[c] for c in children} == {leftover}
    # Used up; the 412's own entry (its range as sent) stays until a lookup of that range.
    assert group.model.cluster("a").affinity == {"0x00000000_0x00000001": leftover}


def test_409_leaves_no_entry(group: RunningPeerGroup, http: httpx.Client) -> None:
    assert unload(http, group.admin_urls["a"], "t/one", "127.0.0.1:1").status_code == 409
    assert group.model.cluster("a").affinity == {}


@pytest.mark.parametrize(
    "group", [two_namespaces(leader_broker=1, leader_service_url_missing=True)], indirect=True
)
def test_leader_without_a_url_is_412_before_the_entry(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = unload(http, group.broker_urls["a"][0], "t/one", ids(group)[2])
    assert r.status_code == 412
    assert r.json()["reason"] == "Redirected broker's service url is not configured."
    assert group.model.cluster("a").affinity == {}
    # Asked of the leader itself, it is kept.
    assert unload(http, group.broker_urls["a"][1], "t/one", ids(group)[2]).status_code == 204


@pytest.mark.parametrize("group", [two_namespaces(failure_domains_enabled=True)], indirect=True)
def test_runtime_configuration_says_whether_failure_domains_are_enabled(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    body = http.get(f"{group.admin_urls['a']}/admin/v2/brokers/configuration/runtime").json()
    assert body["failureDomainsEnabled"] == "true"
