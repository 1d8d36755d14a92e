"""Topic stats, internal stats and broker-stats/topics over real HTTP: what the traffic
model says at the simulated time, in Pulsar's shapes and nesting."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.core.bundles import BundleRange
from balancer.core.hashing import hash_position
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

NS = "acme/orders"
LEDGER_BYTES = 1_000_000


def scenario(seed: int = 4, noise_pct: float = 0.0) -> dict[str, Any]:
    return {
        "name": "stats",
        "seed": seed,
        "noise_pct": noise_pct,
        "broker": {"ledger_max_size_bytes": LEDGER_BYTES, "stats_update_interval_s": 60},
        "clusters": [{"name": "east", "brokers": 3}, {"name": "west"}],
        "namespaces": [
            {
                "name": NS,
                "cluster": "east",
                "bundles": 8,
                "topic_groups": [
                    {
                        "name": "orders",
                        "partitions": 12,
                        "total_msg_rate_in": 1200,
                        "avg_msg_size_bytes": 500,
                        "subscriptions": 2,
                        "consumers_per_subscription": 3,
                        "producers_per_topic": 2,
                    },
                    {"name": "ev", "count": 60, "total_msg_rate_in": 3000, "zipf_exponent": 1.2},
                ],
                "outstanding": [{"topic": "hot", "msg_rate_in": 1000, "avg_msg_size_bytes": 100}],
                "changes": [{"kind": "step", "at_s": 30, "factor": 2.0, "topics": ["hot"]}],
            },
            {"name": "acme/west-ns", "cluster": "west", "topic_groups": [{"name": "w"}]},
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


def stats(group: RunningPeerGroup, http: httpx.Client, topic: str, what: str = "stats") -> Any:
    r = http.get(f"{group.admin_urls['east']}/admin/v2/persistent/{NS}/{topic}/{what}")
    assert r.status_code == 200, r.text
    return r.json()


def test_topic_stats_follow_the_traffic_model(group: RunningPeerGroup, http: httpx.Client) -> None:
    s = stats(group, http, "orders-partition-4")
    assert s["msgRateIn"] == pytest.approx(100.0)
    assert s["msgRateOut"] == pytest.approx(200.0)  # two subscriptions
    assert s["msgThroughputIn"] == pytest.approx(100.0 * 500)
    assert s["msgThroughputOut"] == pytest.approx(200.0 * 500)
    assert s["averageMsgSize"] == 500
    assert len(s["publishers"]) == 2
    assert sum(p["msgRateIn"] for p in s["publishers"]) == pytest.approx(100.0)
    assert set(s["subscriptions"]) == {"sub-0", "sub-1"}
    assert all(len(sub["consumers"]) == 3 for sub in s["subscriptions"].values())
    for key in ("storageSize", "backlogSize", "offloadedStorageSize"):
        assert isinstance(s[key], int)


def test_a_step_change_shows_at_its_time(group: RunningPeerGroup, http: httpx.Client) -> None:
    assert stats(group, http, "hot")["msgRateIn"] == pytest.approx(1000.0)
    group.clock.advance(29.9)
    assert stats(group, http, "hot")["msgRateIn"] == pytest.approx(1000.0)
    group.clock.advance(0.1)
    assert stats(group, http, "hot")["msgRateIn"] == pytest.approx(2000.0)


def test_storage_grows_with_throughput_in(group: RunningPeerGroup, http: httpx.Client) -> None:
    before = stats(group, http, "orders-partition-4")["storageSize"]
    group.clock.advance(120)
    after = stats(group, http, "orders-partition-4")["storageSize"]
    assert after - before == pytest.approx(100 * 500 * 120, abs=1)


def test_ledgers_roll_over_at_the_size_limit(group: RunningPeerGroup, http: httpx.Client) -> None:
    group.clock.advance(1000)  # 50 kB/s x 1000 s = 50 MB = 50 ledgers of 1 MB
    internal = stats(group, http, "orders-partition-4", "internalStats")
    ledgers = internal["ledgers"]
    assert len(ledgers) == 51
    assert all(x["size"] == LEDGER_BYTES for x in ledgers[:-1])
    assert ledgers[-1]["size"] == 0 and ledgers[-1]["entries"] == 0  # current: not filled in
    assert [x["ledgerId"] for x in ledgers] == sorted(x["ledgerId"] for x in ledgers)
    storage = stats(group, http, "orders-partition-4")["storageSize"]
    in_process, current = group.ledgers(f"persistent://{NS}/orders-partition-4")
    assert [x.ledger_id for x in in_process] == [x["ledgerId"] for x in ledgers]
    assert current == internal["currentLedgerSize"]
    assert group.topic_stats(f"persistent://{NS}/orders-partition-4")["storageSize"] == storage
    assert internal["currentLedgerSize"] == storage % LEDGER_BYTES
    assert internal["totalSize"] == storage
    assert internal["lastConfirmedEntry"].startswith(f"{ledgers[-1]['ledgerId']}:")


def broker_stats(group: RunningPeerGroup, http: httpx.Client, cluster: str = "east") -> list[Any]:
    return [
        http.get(f"{u}/admin/v2/broker-stats/topics").json() for u in group.broker_urls[cluster]
    ]


def test_broker_stats_nesting_and_spread_over_brokers(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    per_broker = broker_stats(group, http)
    seen: dict[str, int] = {}
    for broker, doc in enumerate(per_broker):
        # This cluster's namespaces, plus the broker's V1 heartbeat namespace.
        heartbeat = f"pulsar/east/{group.broker_urls['east'][broker].removeprefix('http://')}"
        assert set(doc) <= {NS, heartbeat} and heartbeat in doc
        for bundle_text, domains in doc.get(NS, {}).items():
            bundle = BundleRange.parse(bundle_text)
            assert set(domains) == {"persistent"}
            assert group.model.namespaces[NS].owners[bundle] == broker
            for topic, s in domains["persistent"].items():
                assert bundle.contains(hash_position(topic))
                assert {"msgRateIn", "msgThroughputOut", "storageSize", "publishers"} <= set(s)
                seen[topic] = seen.get(topic, 0) + 1
    every = http.get(f"{group.admin_urls['east']}/admin/v2/persistent/{NS}").json()
    assert sorted(every) == sorted(group.topics(NS))
    assert seen == {t: 1 for t in every}  # each topic on exactly one broker
    assert sum(1 for doc in per_broker if NS in doc) >= 2  # spread over more than one broker
    west = group.broker_urls["west"][0].removeprefix("http://")
    assert set(broker_stats(group, http, "west")[0]) == {"acme/west-ns", f"pulsar/west/{west}"}


def test_broker_stats_are_a_snapshot_refreshed_every_interval(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    def hot_rate() -> float:
        for doc in broker_stats(group, http):
            for domains in doc.get(NS, {}).values():
                s = domains["persistent"].get(f"persistent://{NS}/hot")
                if s is not None:
                    return float(s["msgRateIn"])
        raise AssertionError("hot topic not in any broker's stats")

    group.clock.advance(45)  # step at 30 s, but the snapshot is from 0 s
    assert hot_rate() == pytest.approx(1000.0)
    assert stats(group, http, "hot")["msgRateIn"] == pytest.approx(2000.0)
    group.clock.advance(15)
    assert hot_rate() == pytest.approx(2000.0)


def test_broker_stats_show_the_children_after_a_split(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.put(f"{group.admin_urls['east']}/admin/v2/namespaces/{NS}/0x00000000_0x20000000/split")
    assert r.status_code == 204
    bundles = {b for doc in broker_stats(group, http) for b in doc.get(NS, {})}
    assert "0x00000000_0x20000000" not in bundles
    assert bundles <= {"0x00000000_0x10000000", "0x10000000_0x20000000"} | {
        str(b) for b in group.model.namespaces[NS].layout.bundles
    }


def test_partitioned_base_name_has_no_topic_stats(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    r = http.get(f"{group.admin_urls['east']}/admin/v2/persistent/{NS}/orders/stats")
    assert r.status_code == 404
    p = http.get(f"{group.admin_urls['east']}/admin/v2/persistent/{NS}/orders/partitions").json()
    assert p == {"partitions": 12}
    listed = http.get(f"{group.admin_urls['east']}/admin/v2/persistent/{NS}/partitioned").json()
    assert listed == [f"persistent://{NS}/orders"]
    single = http.get(f"{group.admin_urls['east']}/admin/v2/persistent/{NS}/hot/partitions")
    assert single.json() == {"partitions": 0}


@pytest.mark.parametrize(("other_seed", "same"), [(9, True), (10, False)], ids=["same", "other"])
def test_deterministic_given_the_seed(http: httpx.Client, other_seed: int, same: bool) -> None:
    def snapshot(seed: int) -> str:
        with start_peer_group(parse_scenario(scenario(seed=9, noise_pct=10.0)), seed=seed) as g:
            g.clock.advance(3700)
            docs = [
                stats(g, http, "ev-7"),
                stats(g, http, "orders-partition-3", "internalStats"),
                broker_stats(g, http),
            ]
            owners = sorted((str(b), o) for b, o in g.model.namespaces[NS].owners.items())
            # Ports are OS-chosen, so they differ between runs; everything else must not.
            return re.sub(r"127\.0\.0\.1:\d+", "host", json.dumps([docs, owners], sort_keys=True))

    assert (snapshot(9) == snapshot(other_seed)) is same
