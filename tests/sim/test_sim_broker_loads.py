"""The simulator's brokers say their load with Pulsar's lags (issue 41): cpu and bandwidth
sampled once a minute (LinuxBrokerHostUsageImpl), `lastUpdate` the last store write
(ModularLoadManagerImpl.writeBrokerDataOnZooKeeper), and the extensible load manager's
load in `GET /admin/v2/broker-stats/metrics` (BrokerLoadData.toMetrics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.sim.group import RunningPeerGroup
from tests.sim.broker_group import FIRST, NS, one_namespace, started


def scenario(**cluster: Any) -> dict[str, Any]:
    return one_namespace("loads", seed=3, topics=40, **cluster)


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, scenario()) as g:
        yield g


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, timeout=10) as c:
        yield c


def report(g: RunningPeerGroup, http: httpx.Client, broker: int) -> dict[str, Any]:
    r = http.get(f"{g.broker_urls['a'][broker]}/admin/v2/broker-stats/load-report")
    assert r.status_code == 200, r.text
    return dict(r.json())


def owner_of_first(g: RunningPeerGroup) -> int:
    ns = g.model.namespaces[NS]
    (bundle,) = [b for b in ns.layout.bundles if str(b) == FIRST]
    return ns.owners[bundle]


def test_last_update_is_the_last_store_write_not_the_read(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    first = report(group, http, 0)
    written = first["lastUpdate"]
    group.clock.advance(120)
    again = report(group, http, 0)
    assert again["lastUpdate"] == written  # nothing changed by 10 %: not written again
    group.clock.advance(12 * 60)  # 14 min since the write
    assert report(group, http, 0)["lastUpdate"] == written
    group.clock.advance(61)  # past loadBalancerReportUpdateMaxIntervalMinutes (15)
    assert report(group, http, 0)["lastUpdate"] == group.clock.now_ms()


def test_cpu_and_bandwidth_show_the_minute_before_the_last_sample(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    source = owner_of_first(group)
    dest = next(b for b in range(3) if b != source)
    before = report(group, http, source)
    group.clock.advance(60)
    report(group, http, source)
    admin = group.broker_urls["a"][dest]
    r = http.put(
        f"{admin}/admin/v2/namespaces/{NS}/{FIRST}/unload",
        params={"destinationBroker": admin.removeprefix("http://")},
    )
    if r.status_code == 307:  # the modular load manager: asked of the leader
        r = http.put(str(r.headers["location"]))
    assert r.status_code == 204, r.text
    group.clock.advance(60)
    first_after = report(group, http, source)
    # ownership and rates show the move; the sampled usages still the old layout
    assert first_after["numBundles"] == before["numBundles"] - 1
    assert first_after["cpu"]["usage"] == pytest.approx(before["cpu"]["usage"])
    assert first_after["bandwidthIn"]["usage"] == pytest.approx(before["bandwidthIn"]["usage"])
    group.clock.advance(60)
    second_after = report(group, http, source)
    assert second_after["cpu"]["usage"] < before["cpu"]["usage"]
    assert second_after["bandwidthIn"]["usage"] < before["bandwidthIn"]["usage"]


@pytest.mark.parametrize("group", [scenario(idle_brokers=[2])], indirect=True)
def test_an_idle_broker_burns_a_jvm_baseline(group: RunningPeerGroup, http: httpx.Client) -> None:
    idle = report(group, http, 2)
    assert idle["numBundles"] == 0
    assert 0.02 <= idle["cpu"]["usage"] / idle["cpu"]["limit"] <= 0.03


@pytest.mark.parametrize("group", [scenario(load_manager="extensible")], indirect=True)
def test_extensible_brokers_publish_their_load_as_metrics(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    for index, url in enumerate(group.broker_urls["a"]):
        r = http.get(f"{url}/admin/v2/broker-stats/metrics")
        assert r.status_code == 200
        body = r.json()
        assert isinstance(body, list) and all(set(m) == {"metrics", "dimensions"} for m in body)
        host = group.model.cluster("a").broker_address(index).rsplit(":", 1)[0]
        lb = [m for m in body if m["dimensions"].get("metric") == "loadBalancing"]
        usage = next(m for m in lb if "feature" not in m["dimensions"])
        assert usage["dimensions"] == {"metric": "loadBalancing", "broker": host}
        assert set(usage["metrics"]) == {
            "brk_lb_cpu_usage",
            "brk_lb_memory_usage",
            "brk_lb_directMemory_usage",
            "brk_lb_bandwidth_in_usage",
            "brk_lb_bandwidth_out_usage",
        }
        assert 0 < usage["metrics"]["brk_lb_cpu_usage"] < 100
        features = {
            m["dimensions"]["feature"]: m["metrics"] for m in lb if "feature" in m["dimensions"]
        }
        assert set(features) == {"max", "max_ema"}
        assert 0 < features["max"]["brk_lb_resource_usage"] <= 1


def test_modular_brokers_list_their_usages_alone(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    # ModularLoadManagerImpl.updateLoadBalancingMetrics: the five usages, no features.
    body = http.get(f"{group.broker_urls['a'][0]}/admin/v2/broker-stats/metrics").json()
    lb = [m for m in body if m["dimensions"].get("metric") == "loadBalancing"]
    assert len(lb) == 1 and "brk_lb_cpu_usage" in lb[0]["metrics"]
    assert not [m for m in body if "brk_lb_resource_usage" in m["metrics"]]
