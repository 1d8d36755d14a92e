"""Pulsar's broker routes a broker mover relies on (pulsar-contract.md, "Moving bundles
between brokers"): the load report's shape, ownedNamespaces, leaderBroker, unload with a
destination (204 / 409 inactive destination / 412 unknown bundle) and dynamic configuration.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from balancer.core.broker_load import Resource
from balancer.pulsar.broker_admin import LoadReportUnavailableError
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import ConflictError, PreconditionFailedError
from tests.contract.targets import ContractTarget, Namespace

pytestmark = pytest.mark.pulsar_contract

FIRST = "0x00000000_0x40000000"
LOAD_REPORT_KEYS = {
    "cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut", "msgRateIn", "msgRateOut",
    "msgThroughputIn", "msgThroughputOut", "numTopics", "numBundles", "numProducers",
    "numConsumers", "bundles", "lastStats", "lastUpdate",
}  # fmt: skip


@pytest.fixture
def client(target: ContractTarget) -> Iterator[PulsarPeerGroup]:
    with target.client() as admin:
        yield admin


def owner_of(client: PulsarPeerGroup, cluster: str, name: str) -> str | None:
    owners = [b for b in client.list_brokers(cluster) if name in client.owned_bundles(cluster, b)]
    assert len(owners) <= 1, f"{name} owned by {owners}"
    return owners[0] if owners else None


def test_load_report_shape(target: ContractTarget, client: PulsarPeerGroup) -> None:
    broker = client.list_brokers(target.cluster)[0]
    raw = target.http.get(
        f"{client.broker_url(target.cluster, broker)}/admin/v2/broker-stats/load-report"
    )
    if raw.status_code == 500:  # the extensible load manager has no load report
        with pytest.raises(LoadReportUnavailableError):
            client.load_report(target.cluster, broker)
        pytest.skip("extensible load manager: no load report")
    assert raw.status_code == 200, raw.text
    assert set(raw.json()) >= LOAD_REPORT_KEYS
    for key in ("cpu", "bandwidthIn", "bandwidthOut"):
        assert set(raw.json()[key]) >= {"usage", "limit"}
    report = client.load_report(target.cluster, broker)
    assert report.broker == broker and set(report.resources) >= {Resource.CPU}
    assert report.num_bundles == len(report.bundles)


def test_owned_namespaces_names_every_owned_bundle_once(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    layout = client.get_bundles(shared_ns.name)
    for bundle in layout.bundles:
        if shared_ns.topics_in(bundle.lower, bundle.upper):  # looked up: owned
            assert owner_of(client, target.cluster, f"{shared_ns.name}/{bundle}") is not None
    for broker in client.list_brokers(target.cluster):
        for status in client.owned_bundles(target.cluster, broker).values():
            assert status.broker_assignment in ("primary", "secondary", "shared")


def test_owned_namespaces_of_another_broker_redirects_to_it(
    target: ContractTarget, client: PulsarPeerGroup
) -> None:
    brokers = client.list_brokers(target.cluster)
    here = target.admin_url.split("://", 1)[1].rstrip("/")
    other = next((b for b in brokers if b != here), None)
    if other is None or here not in brokers:
        pytest.skip("needs an admin URL that is one broker of several")
    r = target.http.get(target.url(f"/admin/v2/brokers/{target.cluster}/{other}/ownedNamespaces"))
    assert r.status_code == 307
    # To the broker's registered URL (`PulsarWebResource.maybeRedirectToBroker`): its
    # webServiceUrlTls when asked over https, which need not end in the id's port.
    assert r.headers["location"].startswith(client.broker_url(target.cluster, other) + "/")


def test_leader_broker_is_an_active_broker(target: ContractTarget, client: PulsarPeerGroup) -> None:
    leader = client.leader_broker(target.cluster)
    assert leader.service_url.startswith("http")
    assert leader.broker_id in client.list_brokers(target.cluster)


def test_unload_with_a_destination(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    brokers = client.list_brokers(target.cluster)
    name = f"{fresh_ns.name}/{FIRST}"
    source = owner_of(client, target.cluster, name)
    dest = next((b for b in brokers if b != source), brokers[0])
    client.unload_bundle(fresh_ns.name, FIRST, destination_broker=dest)  # 204
    # The modular load manager answers before ownership: the next lookup assigns it (the
    # simulator's clients reconnect by themselves when its clock moves on).
    if target.sim is None:
        topic = fresh_ns.topics_in(0x00000000, 0x40000000)[0].replace("://", "/")
        assert target.request("GET", f"/lookup/v2/topic/{topic}").status_code == 200
    landed = target.wait_for(
        lambda: owner_of(client, target.cluster, name), what="the bundle owned", sim_advance_s=1
    )
    assert landed in brokers
    if target.sim is not None:  # no concurrent lookup in the simulator: the destination
        assert landed == dest


def test_unload_to_an_inactive_broker_is_409(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    with pytest.raises(ConflictError) as raised:
        client.unload_bundle(shared_ns.name, FIRST, destination_broker="127.0.0.1:1")
    assert "inactive destination broker" in raised.value.reason


def test_unload_of_an_unknown_bundle_to_an_active_broker_is_412(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    dest = client.list_brokers(target.cluster)[0]
    with pytest.raises(PreconditionFailedError):
        client.unload_bundle(shared_ns.name, "0x00000000_0x00000001", destination_broker=dest)


def test_dynamic_configuration(target: ContractTarget, client: PulsarPeerGroup) -> None:
    runtime = client.runtime_configuration(target.cluster)
    current = runtime["loadBalancerSheddingEnabled"]
    assert current in ("true", "false")
    assert runtime["loadBalancerAutoBundleSplitEnabled"] in ("true", "false")
    client.set_dynamic_configuration(target.cluster, "loadBalancerSheddingEnabled", current)
    assert client.dynamic_configuration(target.cluster)["loadBalancerSheddingEnabled"] == current
    with pytest.raises(PreconditionFailedError):
        client.set_dynamic_configuration(target.cluster, "brokerServicePort", "6650")
