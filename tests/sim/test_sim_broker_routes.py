"""The simulator's broker routes (issue 35): load report, ownedNamespaces, leaderBroker,
unload with a destination (modular and extensible), dynamic configuration, isolation
policies, failure domains, anti-affinity, and the broker scenario keys."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.sim import PeerGroup, parse_scenario, start_peer_group
from balancer.sim.group import RunningPeerGroup
from balancer.sim.scenarios import ScenarioError
from tests.sim.broker_group import FIRST, NS, one_namespace, started


def scenario(**cluster: Any) -> dict[str, Any]:
    return one_namespace("brokers", seed=3, topics=40, **cluster)


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, scenario()) as g:
        yield g


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, timeout=10) as c:
        yield c


def ids(g: RunningPeerGroup) -> list[str]:
    return [u.removeprefix("http://") for u in g.broker_urls["a"]]


def owner(g: RunningPeerGroup, bundle: str = FIRST) -> int | None:
    ns = g.model.namespaces[NS]
    with g.model.lock:
        g.model.brokers.settle()
        chosen = next(b for b in ns.layout.bundles if str(b) == bundle)
        return None if chosen in ns.unowned else ns.owners[chosen]


def not_owner(g: RunningPeerGroup) -> int:
    """The first broker that does not own the FIRST bundle now."""
    source = owner(g)
    return next(b for b in range(3) if b != source)


def test_load_report_is_computed_from_the_bundles_a_broker_owns(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    reports = [
        http.get(f"{u}/admin/v2/broker-stats/load-report").json() for u in group.broker_urls["a"]
    ]
    assert sum(r["numBundles"] for r in reports) == 4
    assert sum(r["msgRateIn"] for r in reports) == pytest.approx(4000)
    for r in reports:
        for key in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut"):
            assert r[key]["limit"] > 0 and r[key]["usage"] >= 0
        assert set(r["lastStats"]) == set(r["bundles"])
        assert r["numTopics"] == sum(s["topics"] for s in r["lastStats"].values())
        assert r["lastUpdate"] == group.clock.now_ms()  # the first report is written now
    busiest = max(reports, key=lambda r: r["msgThroughputIn"])
    assert busiest["bandwidthIn"]["usage"] == pytest.approx(busiest["msgThroughputIn"] * 8 / 1000)


@pytest.mark.parametrize("group", [scenario(load_manager="extensible")], indirect=True)
def test_load_report_under_the_extensible_load_manager_is_500(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.get(f"{group.admin_urls['a']}/admin/v2/broker-stats/load-report")
    assert r.status_code == 500
    assert "UnsupportedOperationException" in r.json()["reason"]


def test_owned_namespaces_lists_each_brokers_bundles_and_redirects_elsewhere(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    names: list[str] = []
    for url, bid in zip(group.broker_urls["a"], ids(group), strict=True):
        owned = http.get(f"{url}/admin/v2/brokers/a/{bid}/ownedNamespaces").json()
        assert owned[f"pulsar/a/{bid}/0x00000000_0xffffffff"]["is_active"] is True
        names += [n for n in owned if n.startswith(f"{NS}/")]
        for status in owned.values():
            assert status == {
                "broker_assignment": "shared",
                "is_controlled": False,
                "is_active": True,
            }
    assert sorted(names) == sorted(f"{NS}/{b}" for b in group.bundles(NS).bundles)
    other = ids(group)[1]
    r = http.get(f"{group.admin_urls['a']}/admin/v2/brokers/a/{other}/ownedNamespaces")
    assert r.status_code == 307  # PulsarWebResource.maybeRedirectToBroker: its webServiceUrl
    assert r.headers["location"] == f"http://{other}/admin/v2/brokers/a/{other}/ownedNamespaces"
    r = http.get(f"{group.admin_urls['a']}/admin/v2/brokers/a/127.0.0.1:1/ownedNamespaces")
    assert r.status_code == 404  # no broker has that id: no redirect to a guess
    assert "not found in available brokers" in r.json()["reason"]


def test_leader_broker(group: RunningPeerGroup, http: httpx.Client) -> None:
    body = http.get(f"{group.broker_urls['a'][2]}/admin/v2/brokers/leaderBroker").json()
    assert body == {"serviceUrl": f"http://{ids(group)[0]}", "brokerId": ids(group)[0]}


def unload(
    http: httpx.Client, url: str, destination: str, bundle: str = FIRST, ns: str = NS
) -> httpx.Response:
    return http.put(
        f"{url}/admin/v2/namespaces/{ns}/{bundle}/unload",
        params={"destinationBroker": destination},
    )


@pytest.mark.parametrize("group", [scenario(leader_broker=1)], indirect=True)
def test_modular_unload_goes_to_the_leader_answers_before_ownership_and_the_next_lookup_lands(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    source = owner(group)
    assert source is not None
    dest = not_owner(group)
    r = unload(http, group.broker_urls["a"][0], ids(group)[dest])
    assert r.status_code == 307  # validateLeaderBrokerAsync
    assert r.headers["location"].startswith(group.broker_urls["a"][1])
    assert "authoritative=false" in r.headers["location"]
    r = http.put(r.headers["location"])
    assert r.status_code == 204
    assert owner(group) is None  # 204 before the destination owns it
    group.clock.advance(1)
    assert owner(group) == dest
    [move] = http.get(f"{group.admin_urls['a']}/sim/v1/moves").json()
    assert move["source"] == ids(group)[source]
    assert move["destination"] == move["landed"] == ids(group)[dest]
    assert move["outcome"] == "landed"


@pytest.mark.parametrize("group", [scenario(move_elsewhere_probability=1.0)], indirect=True)
def test_a_concurrent_lookup_may_place_the_bundle_elsewhere(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    dest = not_owner(group)
    assert unload(http, group.admin_urls["a"], ids(group)[dest]).status_code == 204
    group.clock.advance(1)
    landed = owner(group)
    assert landed is not None and landed != dest
    assert group.model.brokers.moves[0].outcome == "landed_elsewhere"


def test_a_request_for_the_bundle_before_the_clients_reconnect_takes_the_destination(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    dest = not_owner(group)
    assert unload(http, group.admin_urls["a"], ids(group)[dest]).status_code == 204
    r = http.put(
        f"{group.admin_urls['a']}/admin/v2/namespaces/{NS}/{FIRST}/split",
        params={"splitAlgorithmName": "range_equally_divide"},
        follow_redirects=True,
    )
    assert r.status_code == 204  # the owner lookup used the kept destination up
    with group.model.lock:
        group.model.brokers.settle()
    assert group.model.brokers.moves[0].outcome == "split"
    assert {group.model.namespaces[NS].owners[c] for c in group.splits(NS)[0].children} == {dest}


@pytest.mark.parametrize("group", [scenario(load_manager="extensible")], indirect=True)
def test_extensible_unload_is_a_transfer_owned_when_it_returns(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    dest = not_owner(group)
    # No leader redirect: any broker transfers.
    assert unload(http, group.broker_urls["a"][2], ids(group)[dest]).status_code == 204
    assert owner(group) == dest
    assert group.model.brokers.moves[0].outcome == "landed"


def test_unload_errors(group: RunningPeerGroup, http: httpx.Client) -> None:
    url = group.admin_urls["a"]
    r = unload(http, url, "127.0.0.1:1")
    assert r.status_code == 409
    assert (
        r.json()["reason"] == "Not allowed unload namespace bundle to inactive destination broker"
    )
    # Checked before the bundle and the namespace, as NamespacesBase does.
    assert unload(http, url, "127.0.0.1:1", bundle="0x00000000_0x00000001").status_code == 409
    assert unload(http, url, ids(group)[1], bundle="0x00000000_0x00000001").status_code == 412
    assert unload(http, url, ids(group)[1], ns="t/missing").status_code == 404
    # A leading http:// is stripped.
    assert unload(http, url, f"http://{ids(group)[1]}").status_code == 204
    assert group.model.brokers.moves[-1].destination == 1


def test_unload_of_an_unowned_bundle_is_204_and_keeps_the_destination(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    group.release_bundle(NS, FIRST)
    assert unload(http, group.admin_urls["a"], ids(group)[2]).status_code == 204
    group.clock.advance(1)
    assert owner(group) == 2
    assert group.model.brokers.moves[0].source is None


def test_a_plain_unload_keeps_todays_behaviour(group: RunningPeerGroup, http: httpx.Client) -> None:
    before = owner(group)
    assert before is not None
    r = http.put(f"{group.admin_urls['a']}/admin/v2/namespaces/{NS}/{FIRST}/unload")
    assert r.status_code == 204
    assert owner(group) == (before + 1) % 3
    assert group.model.brokers.moves == [] and len(group.model.unloads) == 1


def test_dynamic_configuration(group: RunningPeerGroup, http: httpx.Client) -> None:
    base = f"{group.broker_urls['a'][1]}/admin/v2/brokers/configuration"
    runtime = http.get(f"{base}/runtime").json()
    assert runtime["loadBalancerSheddingEnabled"] == "true"
    assert runtime["loadBalancerAutoBundleSplitEnabled"] == "true"
    assert http.get(f"{base}/values").json() == {}
    assert http.post(f"{base}/loadBalancerSheddingEnabled/false").status_code == 200
    # Every broker of the cluster sees it (the configuration store).
    other = f"{group.broker_urls['a'][2]}/admin/v2/brokers/configuration"
    assert http.get(f"{other}/runtime").json()["loadBalancerSheddingEnabled"] == "false"
    assert http.get(f"{other}/values").json() == {"loadBalancerSheddingEnabled": "false"}
    r = http.post(f"{base}/brokerServicePort/1")
    assert r.status_code == 412 and "non-dynamic" in r.json()["reason"]
    # BrokersBase.deleteDynamicConfiguration: 204, the broker's own value again; a key
    # without an override is no error; a key that is not dynamic is 412.
    assert http.delete(f"{base}/loadBalancerSheddingEnabled").status_code == 204
    assert http.get(f"{other}/values").json() == {}
    assert http.get(f"{other}/runtime").json()["loadBalancerSheddingEnabled"] == "true"
    assert http.delete(f"{base}/loadBalancerSheddingEnabled").status_code == 204
    r = http.delete(f"{base}/brokerServicePort")
    assert r.status_code == 412 and "non-dynamic" in r.json()["reason"]
    changes = http.get(f"{group.admin_urls['a']}/sim/v1/config-changes").json()
    assert [(c["name"], c["value"]) for c in changes] == [
        ("loadBalancerSheddingEnabled", "false"),
        ("loadBalancerSheddingEnabled", None),
        ("loadBalancerSheddingEnabled", None),
    ]


def test_no_isolation_policy_is_404_no_failure_domain_is_empty_no_group_is_204(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    url = group.admin_urls["a"]
    r = http.get(f"{url}/admin/v2/clusters/a/namespaceIsolationPolicies")
    assert r.status_code == 404
    assert r.json()["reason"] == "NamespaceIsolationPolicies for cluster a does not exist"
    assert http.get(f"{url}/admin/v2/clusters/a/failureDomains").json() == {}
    r = http.get(f"{url}/admin/v2/namespaces/{NS}/antiAffinity")
    assert r.status_code == 204 and r.content == b""
    assert http.get(f"{url}/admin/v2/namespaces/t/missing/antiAffinity").status_code == 404


PLACED = {
    **scenario(
        idle_brokers=[2],
        isolation_policies=[
            {"name": "iso", "namespaces": ["t/iso.*"], "primary": [1], "min_limit": 1}
        ],
        failure_domains={"rack-1": [0, 1], "rack-2": [2]},
    ),
}
PLACED["namespaces"] = [
    {**PLACED["namespaces"][0], "anti_affinity_group": "pair"},
    {
        "name": "t/iso-1",
        "cluster": "a",
        "bundles": 2,
        "topic_groups": [{"name": "y", "count": 4, "total_msg_rate_in": 10}],
    },
]


@pytest.mark.parametrize("group", [PLACED], indirect=True)
def test_placement_rules_and_idle_brokers(group: RunningPeerGroup, http: httpx.Client) -> None:
    url = group.admin_urls["a"]
    b = ids(group)
    policies = http.get(f"{url}/admin/v2/clusters/a/namespaceIsolationPolicies").json()
    assert policies["iso"]["namespaces"] == ["t/iso.*"]
    assert policies["iso"]["primary"] == [b[1].replace(".", r"\.")]
    assert policies["iso"]["auto_failover_policy"]["parameters"]["min_limit"] == "1"
    domains = http.get(f"{url}/admin/v2/clusters/a/failureDomains").json()
    assert domains == {"rack-1": {"brokers": [b[0], b[1]]}, "rack-2": {"brokers": [b[2]]}}
    r = http.get(f"{url}/admin/v2/namespaces/{NS}/antiAffinity")
    assert (r.status_code, r.text) == (200, "pair")
    # The restarted broker owns nothing; the isolated namespace sits on its primary only,
    # the others on brokers no policy names.
    owners = {ns: set(s.owners.values()) for ns, s in group.model.namespaces.items()}
    assert owners == {NS: {0}, "t/iso-1": {1}}
    owned = http.get(f"{group.broker_urls['a'][1]}/admin/v2/brokers/a/{b[1]}/ownedNamespaces")
    statuses = [v for k, v in owned.json().items() if k.startswith("t/iso-1/")]
    assert statuses and all(
        s == {"broker_assignment": "primary", "is_controlled": True, "is_active": True}
        for s in statuses
    )
    report = http.get(f"{group.broker_urls['a'][2]}/admin/v2/broker-stats/load-report").json()
    assert report["numBundles"] == 0 and report["msgRateIn"] == 0


def test_broker_overrides_change_a_brokers_limits(http: httpx.Client) -> None:
    doc = scenario(
        broker_capacity={"nic_limit_mbit": 1000, "cpu_cores": 4},
        broker_overrides={1: {"nic_limit_mbit": 25000, "cpu_cores": 32}},
    )
    with start_peer_group(parse_scenario(doc)) as g:
        limits = [
            http.get(f"{u}/admin/v2/broker-stats/load-report").json() for u in g.broker_urls["a"]
        ]
    assert [r["bandwidthIn"]["limit"] for r in limits] == [1_000_000, 25_000_000, 1_000_000]
    assert [r["cpu"]["limit"] for r in limits] == [400, 3200, 400]


@pytest.mark.parametrize(
    ("cluster", "needle"),
    [
        ({"idle_brokers": [3]}, "idle_brokers: broker 3 is not one of 3"),
        ({"idle_brokers": [0, 1, 2]}, "at least one broker"),
        ({"failure_domains": {"r": [5]}}, "failure_domains.r: broker 5"),
        ({"load_manager": "central"}, "load_manager"),
        ({"move_elsewhere_probability": 2}, "move_elsewhere_probability"),
        ({"broker_overrides": {7: {}}}, "broker_overrides: broker 7"),
    ],
)
def test_bad_broker_keys_fail_naming_the_key(cluster: dict[str, Any], needle: str) -> None:
    with pytest.raises(ScenarioError, match=needle):
        parse_scenario(scenario(**cluster))


def test_without_the_new_keys_placement_is_the_old_hash() -> None:
    from balancer.sim.ownership import initial_owner

    model = PeerGroup.from_scenario(parse_scenario(scenario())).model
    ns = model.namespaces[NS]
    assert ns.owners == {b: initial_owner(NS, b, 3) for b in ns.layout.bundles}


def test_owner_broker_places_every_bundle_of_a_namespace_on_one_broker() -> None:
    doc = scenario()
    doc["namespaces"][0]["owner_broker"] = 2
    model = PeerGroup.from_scenario(parse_scenario(doc)).model
    assert set(model.namespaces[NS].owners.values()) == {2}
    doc["namespaces"][0]["owner_broker"] = 3
    with pytest.raises(ScenarioError, match=r"namespaces\.0\.owner_broker: broker 3"):
        parse_scenario(doc)
