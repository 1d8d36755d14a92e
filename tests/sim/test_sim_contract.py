"""The simulator answers like Pulsar (tests/fixtures/pulsar), over real HTTP, and the
admin client and collector handle what real brokers send: a V1 heartbeat namespace, hidden
publishers, an empty answer before the first stats update, offloaded bytes still counted in
`storageSize`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from balancer.collector.admin import admin_fetch
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from balancer.core.events import TopicStatsEvent, parse_message
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pulsar"
NS = "acme/archive"
TOPIC = f"persistent://{NS}/log"
LEDGER_BYTES = 10_000_000


def scenario(**broker: Any) -> dict[str, Any]:
    return {
        "name": "contract",
        "seed": 5,
        "broker": {
            "ledger_max_size_bytes": LEDGER_BYTES,
            "offload_duration_s": 10,
            "stats_update_interval_s": 60,
            **broker,
        },
        "clusters": [{"name": "east", "brokers": 2}],
        "namespaces": [
            {
                "name": NS,
                "cluster": "east",
                "bundles": 1,
                "topic_groups": [
                    {
                        "name": "log",
                        "total_msg_rate_in": 1000,
                        "avg_msg_size_bytes": 1000,
                        "initial_storage_bytes": 95_500_000,
                        "producers_per_topic": 3,
                        "subscriptions": 2,
                    },
                    {"name": "ev", "count": 3, "total_msg_rate_in": 30},
                ],
            }
        ],
    }


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value) if value is None else "bool"
    return {int: "number", float: "number", str: "string", list: "list", dict: "object"}[
        type(value)
    ]


def same_shape(sim: dict[str, Any], real: dict[str, Any], where: str, *, exact: bool) -> None:
    """Keys and JSON types of `sim` match Pulsar's (`exact`: the same key set, else a subset)."""
    if exact:
        assert set(sim) == set(real), f"{where}: {set(sim) ^ set(real)}"
    else:
        assert set(sim) <= set(real), f"{where}: not in Pulsar: {set(sim) - set(real)}"
    for key in sim:
        if real[key] is not None:
            assert kind(sim[key]) == kind(real[key]), f"{where}.{key}"


def topics_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """namespace -> bundle -> domain -> topic, flattened to topic -> stats."""
    return {
        t: s
        for bundles in doc.values()
        for domains in bundles.values()
        for topics in domains.values()
        for t, s in topics.items()
    }


def test_simulator_answers_have_pulsars_keys_and_types(http: httpx.Client) -> None:
    with start_peer_group(parse_scenario(scenario())) as group:
        url = f"{group.admin_urls['east']}/admin/v2/persistent/{NS}/log"
        internal = http.get(f"{url}/internalStats").json()
        first = internal["ledgers"][3]["ledgerId"]
        body = {"ledgerId": first, "entryId": 0, "partitionIndex": -1}
        assert http.put(f"{url}/offload", json=body).status_code == 204
        group.clock.advance(60)  # the offload is done; a stats update has run
        real_stats = fixture("topic-stats.json")
        stats = http.get(f"{url}/stats").json()
        same_shape(stats, real_stats, "stats", exact=True)
        same_shape(
            stats["subscriptions"]["sub-0"],
            real_stats["subscriptions"]["billing"],
            "stats.subscriptions",
            exact=False,
        )
        same_shape(
            stats["publishers"][0], real_stats["publishers"][0], "stats.publishers", exact=False
        )
        real_internal = fixture("internal-stats.json")
        internal = http.get(f"{url}/internalStats").json()
        same_shape(internal, real_internal, "internalStats", exact=True)
        for ledger in internal["ledgers"]:
            same_shape(ledger, real_internal["ledgers"][0], "internalStats.ledgers", exact=True)
        assert [lg["offloaded"] for lg in internal["ledgers"][:4]] == [True, True, True, False]
        # ManagedLedgerImpl.getTotalSize: offloaded ledgers still counted in storageSize.
        assert stats["storageSize"] == internal["totalSize"]
        assert stats["offloadedStorageSize"] == 3 * LEDGER_BYTES
        real_broker = fixture("broker-stats-topics.json")
        real_topic = real_broker[NS.replace("archive", "orders")]["0x00000000_0x40000000"][
            "persistent"
        ]["persistent://acme/orders/orders-partition-0"]
        docs = [
            http.get(f"{u}/admin/v2/broker-stats/topics").json() for u in group.broker_urls["east"]
        ]
        for doc in docs:
            heartbeats = [ns for ns in doc if ns.count("/") == 2]
            assert len(heartbeats) == 1 and heartbeats[0].startswith("pulsar/east/")
            for topic, s in topics_of(doc).items():
                same_shape(s, real_topic, f"broker-stats[{topic}]", exact=True)
                for sub in s["subscriptions"].values():
                    same_shape(
                        sub,
                        real_topic["subscriptions"]["billing"],
                        "broker-stats.subscriptions",
                        exact=False,
                    )
        log = next(topics_of(d)[TOPIC] for d in docs if TOPIC in topics_of(d))
        assert log["storageSize"] == stats["storageSize"] and "offloadedStorageSize" not in log


def peer_group(group: RunningPeerGroup) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint(n, u) for n, u in group.admin_urls.items()],
        ClientSettings(
            retry=RetryPolicy(max_attempts=1, base_delay_s=0, max_delay_s=0),
            sleep=lambda s: None,
        ),
    )


class ListSink:
    def __init__(self) -> None:
        self.events: list[TopicStatsEvent] = []

    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
        self.events.extend(e for e in parse_message(value) if isinstance(e, TopicStatsEvent))

    def flush(self) -> None:
        pass


def test_collector_polls_brokers_with_heartbeat_hidden_publishers_and_a_startup_delay() -> None:
    settings = {"expose_publisher_stats": False, "stats_initial_delay_s": 60}
    with (
        start_peer_group(parse_scenario(scenario(**settings))) as group,
        peer_group(group) as admin,
    ):
        sink = ListSink()
        targets = [Target("east", u) for u in group.broker_urls["east"]]
        collector = Collector(targets=targets, fetch=admin_fetch(admin), sink=sink)
        # Before the first stats update: empty bodies, no data yet, no failure.
        assert collector.poll_once() == []
        assert collector.counts.no_data["east"] == 2 and sink.events == []
        group.clock.advance(60)
        assert collector.poll_once() == []  # the heartbeat namespaces do not fail the poll
        assert collector.counts.failures["east"] == 0
        assert collector.counts.skipped_namespaces["east"] == 2  # one heartbeat per broker
        log = [e for e in sink.events if e.topic == TOPIC]
        assert len(log) == 1 and log[0].producerCount == 3  # from producerCount
        assert {e.namespace for e in sink.events} == {NS}


def test_a_v2_health_check_shows_the_v2_heartbeat_which_the_collector_skips() -> None:
    """`brokers healthcheck --topic-version V2` writes to `pulsar/<host:port>`
    (NamespaceService.getHeartbeatNamespaceV2): skipped and counted like the V1 one."""
    settings = {"heartbeat_topic_version": "V2", "stats_update_interval_s": 0}
    with (
        start_peer_group(parse_scenario(scenario(**settings))) as group,
        peer_group(group) as admin,
    ):
        addresses = [u.removeprefix("http://") for u in group.broker_urls["east"]]
        for url, address in zip(group.broker_urls["east"], addresses, strict=True):
            doc = httpx.get(f"{url}/admin/v2/broker-stats/topics").json()
            assert f"pulsar/{address}" in doc and not [ns for ns in doc if ns.count("/") == 2]
        sink = ListSink()
        targets = [Target("east", u) for u in group.broker_urls["east"]]
        collector = Collector(targets=targets, fetch=admin_fetch(admin), sink=sink)
        assert collector.poll_once() == []
        assert collector.counts.skipped_namespaces["east"] == 2  # one heartbeat per broker
        assert {e.namespace for e in sink.events} == {NS}
