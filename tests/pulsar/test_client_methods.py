"""Every typed admin method against the simulated peer group, over real HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.split import SplitAlgorithm
from balancer.core.topics import TopicDomain
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    ConflictError,
    MessageId,
    OffloadState,
    PulsarPeerGroup,
    RetryPolicy,
)
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

LEDGER_BYTES = 10_000_000
SCENARIO: dict[str, Any] = {
    "name": "client-methods",
    "seed": 3,
    "broker": {
        "ledger_max_size_bytes": LEDGER_BYTES,
        "stats_update_interval_s": 0,
        "offload_duration_s": 30,
    },
    "clusters": [{"name": "east", "brokers": 2, "peers": ["west"]}, {"name": "west"}],
    "namespaces": [
        {
            "name": "shop/orders",
            "cluster": "east",
            "topic_groups": [
                {"name": "o", "count": 40, "total_msg_rate_in": 4000, "zipf_exponent": 1.0},
                {"name": "pay", "partitions": 6, "total_msg_rate_in": 600},
            ],
        },
        {
            "name": "shop/audit",
            "cluster": "west",
            "topic_groups": [{"name": "a", "count": 4, "total_msg_rate_in": 10}],
        },
    ],
}


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


@pytest.fixture
def client(sim: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    with PulsarPeerGroup(
        [ClusterEndpoint(name, url) for name, url in sim.admin_urls.items()],
        ClientSettings(retry=RetryPolicy(max_attempts=1)),
    ) as group:
        yield group


def test_get_bundles_returns_the_initial_layout(client: PulsarPeerGroup) -> None:
    assert client.get_bundles("shop/orders") == NamespaceBundles.initial("shop/orders", 4)


def test_split_at_given_positions_applies_in_the_cluster(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    parent = BundleRange(0x00000000, 0x40000000)
    client.split_bundle(
        "shop/orders",
        parent,
        algorithm=SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE,
        boundaries=[0x10000000, 0x30000000],
        unload=True,
    )
    (record,) = sim.model.splits
    assert (record.parent, record.boundaries, record.unloaded) == (
        parent,
        (0x10000000, 0x30000000),
        True,
    )
    assert record.algorithm == "specified_positions_divide"
    layout = client.get_bundles("shop/orders")
    assert layout.boundaries == (
        0,
        0x10000000,
        0x30000000,
        0x40000000,
        0x80000000,
        0xC0000000,
        0xFFFFFFFF,
    )


def test_split_with_pulsars_default_algorithm_and_no_body_positions(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    client.split_bundle("shop/orders", "0x80000000_0xc0000000", algorithm="range_equally_divide")
    (record,) = sim.model.splits
    assert record.boundaries == (0xA0000000,) and record.unloaded is False


def test_split_of_the_largest_bundle(sim: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    layout = client.get_bundles("shop/orders")
    counts = {b: len(client.topics_of_bundle("shop/orders", b)) for b in layout.bundles}
    client.split_bundle("shop/orders", "LARGEST", algorithm="topic_count_equally_divide")
    (record,) = sim.model.splits
    assert counts[record.parent] == max(counts.values())
    assert record.algorithm == "topic_count_equally_divide"


def test_topic_hash_positions_for_a_whole_bundle_and_for_named_topics(
    client: PulsarPeerGroup,
) -> None:
    bundle = BundleRange(0x40000000, 0x80000000)
    everything = client.topic_hash_positions("shop/orders", bundle)
    assert everything.namespace == "shop/orders" and everything.bundle == bundle
    assert everything.positions  # 46 topics over 4 bundles
    for name, position in everything.positions.items():
        assert position == hash_position(name) and bundle.contains(position)
    assert set(everything.positions) == set(client.topics_of_bundle("shop/orders", bundle))
    # A partitioned base name expands to its partitions that fall in the bundle.
    named = client.topic_hash_positions("shop/orders", bundle, ["shop/orders/pay"])
    expected = {
        f"persistent://shop/orders/pay-partition-{p}"
        for p in range(6)
        if bundle.contains(hash_position(f"persistent://shop/orders/pay-partition-{p}"))
    }
    assert expected and set(named.positions) == expected
    two = [n for n in everything.positions if "pay" not in n][:2]
    assert len(two) == 2
    assert set(client.topic_hash_positions("shop/orders", bundle, two).positions) == set(two)


def test_topics_of_bundle_and_lookup_agree_with_the_hash(client: PulsarPeerGroup) -> None:
    layout = client.get_bundles("shop/orders")
    seen: list[str] = []
    for bundle in layout.bundles:
        topics = client.topics_of_bundle("shop/orders", bundle, domain=TopicDomain.PERSISTENT)
        seen.extend(topics)
        for topic in topics[:3]:
            assert client.lookup_bundle(topic) == bundle == layout.find(hash_position(topic))
    assert len(seen) == len(set(seen)) == 40 + 6


def test_topic_stats_are_typed(sim: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    sim.clock.advance(600)
    stats = client.topic_stats("shop/orders/o-0")
    assert stats.msg_rate_in > 0 and stats.msg_throughput_in > 0
    assert stats.average_msg_size == 1024.0
    assert stats.publisher_count == 1 and stats.consumer_count == 1
    assert stats.storage_size > 0
    event = stats.to_event(
        cluster="east", topic="persistent://shop/orders/o-0", timestamp_ms=sim.clock.now_ms()
    )
    assert event.msgRateIn == stats.msg_rate_in


def test_internal_stats_give_ledgers_and_the_current_size(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    sim.clock.advance(3600)
    stats = client.internal_stats("persistent://shop/orders/o-0")
    assert len(stats.ledgers) >= 2
    *closed, current = stats.ledgers
    assert all(x.size == LEDGER_BYTES for x in closed) and current.size == 0
    ids = [x.ledger_id for x in stats.ledgers]
    assert ids == sorted(ids)
    assert stats.ledgers_with_sizes()[-1].size == stats.current_ledger_size > 0
    assert stats.total_size == sum(x.size for x in stats.ledgers_with_sizes())


def test_offload_runs_then_succeeds_and_a_second_trigger_conflicts(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    topic = "persistent://shop/orders/o-0"
    sim.clock.advance(3600)
    assert client.offload_status(topic).state is OffloadState.NOT_RUN
    ledgers = client.internal_stats(topic).ledgers
    client.trigger_offload(topic, MessageId(ledgers[-1].ledger_id, 0))
    assert client.offload_status(topic).state is OffloadState.RUNNING
    with pytest.raises(ConflictError) as info:
        client.trigger_offload(topic, MessageId(ledgers[-1].ledger_id, 0))
    assert info.value.status == 409 and info.value.reason == "Offload already in progress"
    sim.clock.advance(31)
    status = client.offload_status(topic)
    assert status.state is OffloadState.SUCCESS and status.last_error == ""
    assert status.first_unoffloaded == MessageId(ledgers[-1].ledger_id, 0)
    after = client.internal_stats(topic).ledgers
    assert [x.offloaded for x in after[: len(ledgers) - 1]] == [True] * (len(ledgers) - 1)
    assert client.topic_stats(topic).offloaded_storage_size == (len(ledgers) - 1) * LEDGER_BYTES


def test_unload_moves_the_bundle_to_another_broker(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    bundle = BundleRange(0x40000000, 0x80000000)
    client.unload_bundle("shop/orders", bundle)
    (record,) = sim.model.unloads
    assert record.bundle == bundle and record.from_broker != record.to_broker


def test_broker_topic_stats_of_every_broker_cover_the_cluster(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    sim.clock.advance(120)
    brokers = sim.broker_urls["east"]
    assert len(brokers) == 2
    per_broker = [client.broker_topic_stats("east", broker_url=url) for url in brokers]
    topics = [e.topic for stats in per_broker for e in stats]
    assert len(topics) == len(set(topics)) == 46  # each topic on exactly one broker
    assert all(stats.cluster == "east" for stats in per_broker)
    entry = per_broker[0].entries[0]
    assert entry.namespace == "shop/orders" and entry.domain is TopicDomain.PERSISTENT
    assert entry.bundle.contains(hash_position(entry.topic))
    # Without a broker URL, the cluster's admin URL (broker 0) is asked.
    assert {e.topic for e in client.broker_topic_stats("east")} == {e.topic for e in per_broker[0]}
    assert client.request_count(cluster="east", path_template="/admin/v2/broker-stats/topics") == 3


def test_clusters_tenants_and_namespaces(sim: RunningPeerGroup, client: PulsarPeerGroup) -> None:
    assert client.list_clusters() == ("east", "west")
    east = client.get_cluster("east")
    assert east.service_url == sim.admin_urls["east"]
    assert east.peer_cluster_names == ("west",)
    assert client.list_tenants() == ("shop",)
    # The namespace list is the shared configuration store's: every cluster lists them all.
    assert client.list_namespaces("shop") == ("shop/audit", "shop/orders")
    assert client.list_namespaces("shop", via="west") == ("shop/audit", "shop/orders")


def test_peer_clusters_can_be_read_and_set(client: PulsarPeerGroup) -> None:
    assert client.get_peer_clusters("east") == ("west",)
    assert client.get_peer_clusters("west") == ()
    client.set_peer_clusters("west", ["east"])
    assert client.get_peer_clusters("west") == ("east",)
    assert client.get_cluster("west").peer_cluster_names == ("east",)
    assert client.request_count(cluster="west", method="POST") == 1


def test_list_brokers_gives_each_brokers_web_address(
    sim: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    brokers = client.list_brokers("east")
    urls = sorted(sim.broker_urls["east"])
    assert sorted(f"http://{address}" for address in brokers) == urls
    assert client.request_count(cluster="east", path_template="/admin/v2/brokers/{cluster}") == 1
