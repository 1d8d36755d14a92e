"""The admin client's broker calls against the simulator (issue 35, items 1 and 3)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from balancer.core.broker_load import BrokerLoadReport, LoadSource, Resource
from balancer.core.moves.model import IsolationPolicy
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    ConflictError,
    LeaderBroker,
    LoadReportUnavailableError,
    PreconditionFailedError,
    PulsarPeerGroup,
    RetryPolicy,
    ServerError,
)
from balancer.sim.group import RunningPeerGroup
from tests.sim.broker_group import FIRST, NS, one_namespace, started


def scenario(**cluster: Any) -> dict[str, Any]:
    return one_namespace(
        "client-brokers",
        seed=5,
        topics=30,
        namespace={"anti_affinity_group": "g1"},
        **{"leader_broker": 1, **cluster},
    )


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, scenario()) as g:
        yield g


@pytest.fixture
def client(group: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    settings = ClientSettings(
        retry=RetryPolicy(max_attempts=3, base_delay_s=0, max_delay_s=0), sleep=lambda s: None
    )
    with PulsarPeerGroup([ClusterEndpoint("a", group.admin_urls["a"])], settings) as c:
        yield c


def test_load_report_of_each_broker(group: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    brokers = client.list_brokers("a")
    reports = [client.load_report("a", b) for b in brokers]
    assert all(isinstance(r, BrokerLoadReport) for r in reports)
    assert [r.broker for r in reports] == list(brokers)
    assert sum(r.num_bundles for r in reports) == 4
    assert sum(r.msg_rate_in for r in reports) == pytest.approx(3000)
    for r in reports:
        assert set(r.resources) == set(Resource)
        assert r.resources[Resource.CPU].limit == 800
        # lastUpdate (the store write) kept apart; the report is timed by its read.
        assert r.last_update_ms == group.clock.now_ms() != r.timestamp_ms
        assert all(b.startswith(f"{NS}/") for b in r.bundles)
    # Each was asked of its own broker.
    assert set(group.model.broker_requests("a", "load_report").values()) == {1}


@pytest.mark.parametrize("group", [scenario(load_manager="extensible")], indirect=True)
def test_under_the_extensible_load_manager_the_load_comes_from_its_metrics(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    # load-report is a 500 (ExtensibleLoadManagerWrapper.generateLoadReport throws); the
    # usages are in broker-stats/metrics (BrokerLoadData.toMetrics), asked of each broker.
    brokers = client.list_brokers("a")
    reports = [client.load_report("a", b) for b in brokers]
    assert group.model.requests(route="load_report") == len(brokers)  # a 500: not re-sent
    assert set(group.model.broker_requests("a", "broker_metrics").values()) == {1}
    for broker, r in zip(brokers, reports, strict=True):
        assert r.origin is LoadSource.METRICS and r.broker == broker
        assert set(r.resources) == set(Resource)
        assert all(u.limit == 100.0 for u in r.resources.values())
    assert sum(r.resources[Resource.CPU].usage > 2.0 for r in reports) >= 1


@pytest.mark.parametrize("group", [scenario(load_manager="extensible")], indirect=True)
def test_a_broker_with_neither_a_report_nor_load_metrics_is_a_typed_error(
    group: RunningPeerGroup, client: PulsarPeerGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group.model.brokers, "broker_metrics", lambda cluster, broker: [])
    with pytest.raises(LoadReportUnavailableError) as raised:
        client.load_report("a", client.list_brokers("a")[0])
    assert raised.value.status == 500
    assert "no load metrics" in str(raised.value)


def test_owned_bundles_and_the_leader(group: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    brokers = client.list_brokers("a")
    owned: dict[str, str] = {}
    for b in brokers:
        for name, status in client.owned_bundles("a", b).items():
            assert status.is_active and status.broker_assignment == "shared"
            if status.namespace == NS:
                owned[name] = b
    assert sorted(owned) == sorted(f"{NS}/{x}" for x in group.bundles(NS).bundles)
    assert client.leader_broker("a") == LeaderBroker(f"http://{brokers[1]}", brokers[1])


def test_unload_with_a_destination_follows_the_leader_and_lands_after_the_lookup(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    brokers = client.list_brokers("a")
    source = next(b for b in brokers if f"{NS}/{FIRST}" in client.owned_bundles("a", b))
    dest = next(b for b in brokers if b != source)
    client.unload_bundle(NS, FIRST, destination_broker=dest)
    # Modular: the 204 came before anyone owns it; the clients' lookup lands it.
    assert all(f"{NS}/{FIRST}" not in client.owned_bundles("a", b) for b in brokers)
    group.clock.advance(1)
    assert f"{NS}/{FIRST}" in client.owned_bundles("a", dest)
    # Sent to broker 0 (the admin URL), answered by the leader (broker 1) after the 307.
    assert group.model.broker_requests("a", "unload") == {0: 1, 1: 1, 2: 0}


def test_unload_errors_are_typed(client: PulsarPeerGroup) -> None:
    with pytest.raises(ConflictError) as raised:
        client.unload_bundle(NS, FIRST, destination_broker="127.0.0.1:1")
    assert "inactive destination broker" in raised.value.reason
    dest = client.list_brokers("a")[2]
    with pytest.raises(PreconditionFailedError):
        client.unload_bundle(NS, "0x00000000_0x00000001", destination_broker=dest)
    with pytest.raises(ValueError, match="host:port"):
        client.unload_bundle(NS, FIRST, destination_broker="not a broker")


def test_an_unload_with_a_destination_is_never_re_sent_after_a_5xx(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    group.faults.configure(error_rate_500=1.0, only_paths=("/unload",), seed=1)
    dest = client.list_brokers("a")[2]
    with pytest.raises(ServerError):
        client.unload_bundle(NS, FIRST, destination_broker=dest)
    assert group.model.requests(route="unload") == 1
    with pytest.raises(ServerError):  # a plain unload is retried as before
        client.unload_bundle(NS, FIRST)
    assert group.model.requests(route="unload") == 4


def test_dynamic_configuration(group: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    assert client.runtime_configuration("a")["loadBalancerSheddingEnabled"] == "true"
    assert client.dynamic_configuration("a") == {}
    client.set_dynamic_configuration("a", "loadBalancerSheddingEnabled", "false")
    assert client.runtime_configuration("a")["loadBalancerSheddingEnabled"] == "false"
    assert client.dynamic_configuration("a") == {"loadBalancerSheddingEnabled": "false"}
    with pytest.raises(PreconditionFailedError):
        client.set_dynamic_configuration("a", "brokerServicePort", "1")
    client.delete_dynamic_configuration("a", "loadBalancerSheddingEnabled")
    assert client.dynamic_configuration("a") == {}
    assert client.runtime_configuration("a")["loadBalancerSheddingEnabled"] == "true"
    with pytest.raises(PreconditionFailedError):
        client.delete_dynamic_configuration("a", "brokerServicePort")


def test_placement_rules_when_none_are_set(client: PulsarPeerGroup) -> None:
    assert client.isolation_policies("a") == ()
    assert client.failure_domains("a") == {}
    assert client.anti_affinity_group(NS) == "g1"


ISOLATED = scenario(
    isolation_policies=[
        {"name": "p", "namespaces": ["t/ns"], "primary": [0], "secondary": [2], "min_limit": 2}
    ],
    failure_domains={"r1": [0], "r2": [1, 2]},
)
ISOLATED["namespaces"][0]["anti_affinity_group"] = None


@pytest.mark.parametrize("group", [ISOLATED], indirect=True)
def test_placement_rules(group: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    b = client.list_brokers("a")
    [policy] = client.isolation_policies("a")
    assert policy == IsolationPolicy(
        name="p",
        namespaces=("t/ns",),
        primary=(b[0].replace(".", "\\."),),
        secondary=(b[2].replace(".", "\\."),),
        min_primary_brokers=2,
    )
    assert client.failure_domains("a") == {"r1": (b[0],), "r2": (b[1], b[2])}
    assert client.anti_affinity_group(NS) is None
