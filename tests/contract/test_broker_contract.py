"""Pulsar's broker routes a broker mover relies on (pulsar-contract.md, "Moving bundles
between brokers"): the load report's shape (its lastUpdate the last store write, not the
read), a broker's load in broker-stats/metrics (BrokerLoadData.toMetrics under the
extensible load manager), ownedNamespaces, leaderBroker, unload with a destination (204 /
409 inactive destination / 412 unknown bundle / 404 unknown namespace, each refusal read as
the balancer reads it, and the modular load manager's destination kept per bare bundle range
after a refused unload) and dynamic configuration.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.core.broker_load import LoadSource, Resource
from balancer.core.moves.refusals import UnloadRefusal, classify_refusal
from balancer.pulsar.broker_admin import LoadReportUnavailableError
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import ConflictError, NotFoundError, PreconditionFailedError
from balancer.sim import parse_scenario, start_peer_group
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
    # lastUpdate is when the broker last WROTE the report to the metadata store
    # (writeBrokerDataOnZooKeeper: a > 10 % change, or every 15 min), not this read: the
    # client keeps it apart and times the report by its own read.
    written = raw.json()["lastUpdate"]
    assert report.origin is LoadSource.LOAD_REPORT
    assert report.last_update_ms > 0 and report.timestamp_ms >= report.last_update_ms
    if target.sim is not None:  # a steady load: not written again a minute later
        target.sim.clock.advance(60)
        again = target.http.get(
            f"{client.broker_url(target.cluster, broker)}/admin/v2/broker-stats/load-report"
        )
        assert again.json()["lastUpdate"] == written


LOAD_METRICS = {
    "brk_lb_cpu_usage", "brk_lb_memory_usage", "brk_lb_directMemory_usage",
    "brk_lb_bandwidth_in_usage", "brk_lb_bandwidth_out_usage",
}  # fmt: skip


def load_balancing_entries(body: Any, host: str) -> list[dict[str, Any]]:
    """The `loadBalancing` entries of a broker-stats/metrics answer, checked for the shape
    Pulsar writes (a list of Metrics {metrics, dimensions}; the usages under dimensions
    {metric: loadBalancing, broker: <advertised address>}, in percent)."""
    assert isinstance(body, list)
    assert all(isinstance(m, dict) and set(m) >= {"metrics", "dimensions"} for m in body)
    entries = [m for m in body if m["dimensions"].get("metric") == "loadBalancing"]
    usages = [m for m in entries if "feature" not in m["dimensions"]]
    for entry in usages:
        assert set(entry["metrics"]) >= LOAD_METRICS
        assert entry["dimensions"]["broker"] == host
        assert all(entry["metrics"][k] >= 0 for k in LOAD_METRICS)
    return entries


def test_broker_stats_metrics_shape(target: ContractTarget, client: PulsarPeerGroup) -> None:
    broker = client.list_brokers(target.cluster)[0]
    url = client.broker_url(target.cluster, broker)
    raw = target.http.get(f"{url}/admin/v2/broker-stats/metrics")
    assert raw.status_code == 200, raw.text
    entries = load_balancing_entries(raw.json(), broker.rsplit(":", 1)[0])
    extensible = target.http.get(f"{url}/admin/v2/broker-stats/load-report").status_code == 500
    if extensible:  # its load comes from these metrics
        assert {m["dimensions"].get("feature") for m in entries} >= {None, "max", "max_ema"}
        assert client.load_report(target.cluster, broker).origin is LoadSource.METRICS


def test_extensible_brokers_publish_their_load_in_broker_stats_metrics_sim() -> None:
    """The simulator's extensible load manager (the shared target runs the modular one):
    load-report is a 500, broker-stats/metrics holds BrokerLoadData.toMetrics, and the
    client reads the broker's load from it."""
    doc = {
        "name": "contract-extensible",
        "seed": 41,
        "clusters": [{"name": "a", "brokers": 2, "load_manager": "extensible"}],
        "namespaces": [
            {
                "name": "t/ns",
                "cluster": "a",
                "bundles": 4,
                "topic_groups": [{"name": "x", "count": 8, "total_msg_rate_in": 800}],
            }
        ],
    }
    with start_peer_group(parse_scenario(doc)) as group, httpx.Client(timeout=10) as http:
        for url in group.broker_urls["a"]:
            host = url.removeprefix("http://").rsplit(":", 1)[0]
            assert http.get(f"{url}/admin/v2/broker-stats/load-report").status_code == 500
            body = http.get(f"{url}/admin/v2/broker-stats/metrics").json()
            features = {m["dimensions"].get("feature") for m in load_balancing_entries(body, host)}
            assert features == {None, "max", "max_ema"}


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
    with pytest.raises(PreconditionFailedError) as raised:
        client.unload_bundle(shared_ns.name, "0x00000000_0x00000001", destination_broker=dest)
    # Stale only for this kind of 412 (the balancer reads its reason so).
    refusal = classify_refusal(412, raised.value.reason)
    assert refusal is UnloadRefusal.BUNDLE_NOT_FOUND, raised.value.reason


def test_unload_with_a_destination_in_an_unknown_namespace_is_404(
    target: ContractTarget, client: PulsarPeerGroup
) -> None:
    dest = client.list_brokers(target.cluster)[0]
    with pytest.raises(NotFoundError) as raised:
        client.unload_bundle(f"{target.tenant}/no-such-ns", FIRST, destination_broker=dest)
    assert classify_refusal(404, raised.value.reason) is UnloadRefusal.NAMESPACE_GONE


def test_a_refused_unload_leaves_its_destination_for_the_bare_range(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    """The modular load manager keeps an unload's destination under the bare range
    (ModularLoadManagerImpl.setNamespaceBundleAffinity) before the namespace check: the 404
    leaves it, and the next lookup of ANOTHER namespace's unowned bundle with that range
    takes it (apache/pulsar PR #25518 keys it by bundle in new releases only)."""
    runtime = client.runtime_configuration(target.cluster)
    if "Extensible" in runtime.get("loadManagerClassName", ""):
        pytest.skip("extensible load manager: no kept destination (a transfer)")
    brokers = client.list_brokers(target.cluster)
    name = f"{fresh_ns.name}/{FIRST}"
    source = owner_of(client, target.cluster, name)
    dest = next((b for b in brokers if b != source), None)
    if dest is None:
        pytest.skip("needs two brokers: with one, every placement lands on it anyway")
    with pytest.raises(NotFoundError):
        client.unload_bundle(f"{target.tenant}/no-such-ns", FIRST, destination_broker=dest)
    topic = fresh_ns.topics_in(0x00000000, 0x40000000)[0]
    if target.sim is not None:
        # The bundle loses its owner (its broker restarted); a request that looks it up
        # assigns it (a split: the simulator has no topic lookup route).
        target.sim.release_bundle(fresh_ns.name, FIRST)
        r = target.request(
            "PUT",
            f"/admin/v2/namespaces/{fresh_ns.name}/{FIRST}/split",
            params={"splitAlgorithmName": "range_equally_divide"},
        )
        assert r.status_code == 204, r.text
        landed = {
            owner_of(client, target.cluster, f"{fresh_ns.name}/{child}")
            for child in target.sim.splits(fresh_ns.name)[-1].children
        }
        assert landed == {dest}
        return
    # A plain unload keeps no destination (blank); the clients' next lookup takes the
    # leftover one.
    r = target.request("PUT", f"/admin/v2/namespaces/{fresh_ns.name}/{FIRST}/unload")
    assert r.status_code == 204, r.text
    assert target.request("GET", f"/lookup/v2/topic/{topic.replace('://', '/')}").is_success
    landed_real = target.wait_for(
        lambda: owner_of(client, target.cluster, name), what="the bundle owned"
    )
    assert landed_real == dest


def test_dynamic_configuration(target: ContractTarget, client: PulsarPeerGroup) -> None:
    runtime = client.runtime_configuration(target.cluster)
    current = runtime["loadBalancerSheddingEnabled"]
    assert current in ("true", "false")
    assert runtime["loadBalancerAutoBundleSplitEnabled"] in ("true", "false")
    client.set_dynamic_configuration(target.cluster, "loadBalancerSheddingEnabled", current)
    assert client.dynamic_configuration(target.cluster)["loadBalancerSheddingEnabled"] == current
    with pytest.raises(PreconditionFailedError):
        client.set_dynamic_configuration(target.cluster, "brokerServicePort", "6650")
    # `roll finish` deletes an override the pause made (BrokersBase.deleteDynamicConfiguration):
    # the key leaves the store, the broker's own value applies again.
    client.delete_dynamic_configuration(target.cluster, "loadBalancerSheddingEnabled")
    assert "loadBalancerSheddingEnabled" not in client.dynamic_configuration(target.cluster)
    with pytest.raises(PreconditionFailedError):
        client.delete_dynamic_configuration(target.cluster, "brokerServicePort")
