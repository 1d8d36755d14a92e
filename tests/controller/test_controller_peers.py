"""The controller in a peer group whose clusters fail separately, over real HTTP.

east is listed first (the client's entry cluster), west second; each cluster's ClusterData
advertises a service URL that is not the admin URL the client is given (a second port on
the same simulated cluster), as a load balancer or another DNS name would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from balancer.controller.breaker import BreakerState
from balancer.controller.metrics_bridge import attach_metrics
from balancer.core.bundles import BundleRange
from balancer.core.results import ActionResult
from balancer.ops.exporter import BalancerMetrics
from balancer.pulsar import RequestRecord
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group
from tests.controller.test_controller import (
    FIRST,
    HOT_NS,
    SCENARIO,
    Rig,
    decide,
    make_client,
    report,
    rig,
)

__all__ = ["rig"]  # the fixture, shared with test_controller

WEST_NS = "shop/west"
SECOND = BundleRange(0x40000000, 0x80000000)
PEERS: dict[str, Any] = {
    **SCENARIO,
    "clusters": [
        {"name": "east", "brokers": 2, "peers": ["west"], "service_url_alias": True},
        {"name": "west", "peers": ["east"], "service_url_alias": True},
    ],
}


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(PEERS)) as running:
        yield running


def test_a_dead_entry_cluster_stops_no_decision_on_another(sim: RunningPeerGroup, rig: Rig) -> None:
    records: list[RequestRecord] = []
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, process_metrics=False)
    with make_client(sim, on_request=records.append) as client:
        controller = rig.controller(client, failure_threshold=1)
        attach_metrics(controller, metrics)
        handler = rig.handler(controller)
        sim.stop_cluster("east")

        handler.handle(report(sim, 1, 60_000, [(HOT_NS, FIRST, "east"), (WEST_NS, FIRST, "west")]))
        outcomes = {o.cluster: o.result for o in handler.last_outcomes}
        assert outcomes == {"east": ActionResult.FAILED, "west": ActionResult.APPLIED}
        # The next window: east's breaker is open, west goes on deciding and splitting.
        handler.handle(
            report(sim, 2, 120_000, [(HOT_NS, SECOND, "east"), (WEST_NS, SECOND, "west")])
        )
        outcomes = {o.cluster: o.result for o in handler.last_outcomes}
        assert outcomes == {"east": ActionResult.BREAKER_OPEN, "west": ActionResult.APPLIED}
        # The stream's layouts of west, re-read once stale, come from west too.
        rig.clock.advance(3600)
        before = len(records)
        assert handler.layouts.layout("west", WEST_NS) == sim.bundles(WEST_NS)
        assert {(r.cluster, r.status) for r in records[before:]} == {("west", 200)}
        handler.close()

    # Each of west's hot bundles split exactly once, on west; nothing on east.
    assert [(s.cluster, s.parent) for s in sim.splits(WEST_NS)] == [
        ("west", FIRST),
        ("west", SECOND),
    ]
    assert sim.splits(HOT_NS) == []
    # The breaker, its metric and the unanswered requests name east, the cluster that died.
    states = controller.breaker_states()
    assert states["east"].state is BreakerState.OPEN
    assert states["west"].state is BreakerState.CLOSED
    gauge = "pulsar_balancer_circuit_breaker_open"
    assert registry.get_sample_value(gauge, {"cluster": "east"}) == 1
    assert registry.get_sample_value(gauge, {"cluster": "west"}) == 0
    assert {r.cluster for r in records if r.status is None} == {"east"}
    assert {r.cluster for r in records if r.status is not None} == {"west"}


def test_a_split_reaches_the_home_cluster_through_a_cluster_data_redirect(
    sim: RunningPeerGroup, rig: Rig
) -> None:
    """The stats named east, but the namespace lives in its peer west (it moved): the split
    is redirected to west's ClusterData service URL, which is not the configured one."""
    assert sim.model.clusters["west"].advertised_url != sim.admin_urls["west"]
    with make_client(sim) as client:
        controller = rig.controller(client)
        first = replace(decide(sim, rig, namespace=WEST_NS, bundle=FIRST), cluster="east")
        outcome = controller.apply_split(first)
        assert outcome.result is ActionResult.APPLIED, outcome.detail
        assert client.owner_of(WEST_NS) == "west"
        # The owner learnt from that redirect: the next split goes straight to west.
        second = replace(decide(sim, rig, namespace=WEST_NS, bundle=SECOND), cluster="east")
        assert controller.apply_split(second).result is ActionResult.APPLIED
        assert client.get_bundles(WEST_NS).num_bundles == 4 + len(first.boundaries) + len(
            second.boundaries
        )
        controller.close()
    assert [(s.cluster, s.parent) for s in sim.splits(WEST_NS)] == [
        ("west", FIRST),
        ("west", SECOND),
    ]
    # One 307 in all (east's, for the first split), no 412, no loop.
    assert sim.model.requests(route="split", cluster="east") == 1
    assert sim.model.requests(route="split", cluster="west") == 2


def test_bookkeeper_bytes_of_a_peer_clusters_topic_are_read_from_that_cluster(
    sim: RunningPeerGroup,
) -> None:
    """The offload check reads internalStats where the stats came from: the entry cluster
    (east) does not hold west's topics and answers their topic routes with 404, no 307."""
    from balancer.controller.bookkeeper import BookKeeperCheck
    from balancer.core.hashing import hash_position
    from balancer.core.load import TopicLoad
    from balancer.core.thresholds import NamespacePolicy, Thresholds

    [topic, *_] = sim.topics(WEST_NS)
    load = TopicLoad(topic, hash_position(topic), storage_size=1 << 40)
    with make_client(sim) as client:
        check = BookKeeperCheck(client)
        policy = NamespacePolicy(offload_threshold_bytes=1)
        filled = check.fill([("west", load)], Thresholds(policy))
    assert (check.reads, check.failures) == (1, 0)
    assert [(cluster, t.topic) for cluster, t in filled] == [("west", topic)]
    assert sim.model.requests(route="internal_stats", cluster="west") == 1
    assert sim.model.requests(route="internal_stats", cluster="east") == 0
