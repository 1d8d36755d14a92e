"""Typed admin responses: parsing Pulsar's JSON, and rejecting bodies Pulsar never sends."""

from __future__ import annotations

from typing import Any

import pytest

from balancer.core.bundles import BundleRange
from balancer.core.events import validate_event
from balancer.core.topics import TopicDomain
from balancer.pulsar.errors import (
    BadRequestError,
    ClientError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    PulsarAdminError,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
    error_class_for,
)
from balancer.pulsar.models import (
    BrokerTopicStats,
    ClusterData,
    InternalStats,
    LedgerInfo,
    MessageId,
    OffloadState,
    OffloadStatus,
    ResponseShapeError,
    TopicHashPositions,
    TopicStats,
)

STATS: dict[str, Any] = {
    "msgRateIn": 10.5,
    "msgRateOut": 21,
    "msgThroughputIn": 1024.0,
    "msgThroughputOut": 2048.0,
    "averageMsgSize": 97.5,
    "storageSize": 1_000_000,
    "backlogSize": 5000,
    "offloadedStorageSize": 200,
    "publishers": [{"producerId": 1}, {"producerId": 2}],
    "subscriptions": {
        "s1": {"consumers": [{}, {}], "msgBacklog": 7, "msgRateOut": 21.0},
        "s2": {"consumers": [], "msgBacklog": 0},
    },
}


def test_topic_stats_parse_and_become_a_valid_event() -> None:
    stats = TopicStats.from_json(STATS)
    assert stats.msg_rate_in == 10.5 and stats.msg_rate_out == 21.0
    assert stats.storage_size == 1_000_000 and stats.offloaded_storage_size == 200
    assert stats.publisher_count == 2 and stats.consumer_count == 2
    assert stats.subscriptions["s1"].msg_backlog == 7
    event = stats.to_event(cluster="a", topic="persistent://t/ns/x", timestamp_ms=1_800_000_000_000)
    assert validate_event(event.to_dict()) == event
    assert event.producerCount == 2 and event.consumerCount == 2


def test_missing_optional_numbers_default_to_zero() -> None:
    stats = TopicStats.from_json({})
    assert stats.msg_rate_in == 0.0 and stats.publisher_count == 0 and stats.consumer_count == 0


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"msgRateIn": "fast"},
        {"msgRateIn": True},
        {"storageSize": 1.5},
        {"publishers": {}},
        {"subscriptions": []},
        {"subscriptions": {"s": {"consumers": 3}}},
    ],
    ids=[
        "not-object",
        "string-rate",
        "bool-rate",
        "fractional-size",
        "publishers-object",
        "subscriptions-list",
        "consumers-number",
    ],
)
def test_bad_topic_stats_are_rejected(body: Any) -> None:
    with pytest.raises(ResponseShapeError):
        TopicStats.from_json(body)


def test_broker_topic_stats_flatten_the_nesting() -> None:
    body = {
        "t/ns": {
            "0x00000000_0x80000000": {
                "persistent": {"persistent://t/ns/a": STATS, "persistent://t/ns/b": {}},
                "non-persistent": {"non-persistent://t/ns/c": {"msgRateIn": 1.0}},
            },
            "0x80000000_0xffffffff": {"persistent": {"persistent://t/ns/d": {}}},
        },
        "t/other": {},
    }
    parsed = BrokerTopicStats.from_json("a", body)
    assert len(parsed) == 4 and parsed.cluster == "a"
    assert parsed.namespaces() == {"t/ns"}
    by_bundle = parsed.by_bundle("t/ns")
    low = BundleRange(0, 0x80000000)
    assert [e.topic for e in by_bundle[low]] == [
        "persistent://t/ns/a",
        "persistent://t/ns/b",
        "non-persistent://t/ns/c",
    ]
    assert by_bundle[low][2].domain is TopicDomain.NON_PERSISTENT
    assert by_bundle[low][0].stats.msg_rate_in == 10.5


@pytest.mark.parametrize(
    "body",
    [
        {"tns": {}},
        {"t/ns": {"0x0_0x1": {}}},
        {"t/ns": {"0x00000000_0xffffffff": {"weird": {}}}},
        {"t/ns": {"0x00000000_0xffffffff": {"persistent": []}}},
        {"t/ns": []},
        {"t/ns": {"0x00000000_0xffffffff": None}},
        [],
    ],
    ids=[
        "namespace-key",
        "bundle-key",
        "domain",
        "topics-list",
        "bundles-list",
        "domains-null",
        "not-object",
    ],
)
def test_bad_broker_stats_structure_fails_the_whole_answer(body: Any) -> None:
    """The keys and containers above the topic entries come from the broker's own
    NamespaceName and bundle strings: wrong there, the answer is not broker-stats/topics (a
    malformed topic entry is rejected alone: test_broker_stats_entries)."""
    with pytest.raises(ResponseShapeError):
        BrokerTopicStats.from_json("a", body)


def test_internal_stats_fill_the_current_ledger_size() -> None:
    body = {
        "numberOfEntries": 60,
        "totalSize": 6000,
        "currentLedgerEntries": 30,
        "currentLedgerSize": 3000,
        "ledgers": [
            {"ledgerId": 0, "entries": 10, "size": 1000, "offloaded": True},
            {"ledgerId": 1, "entries": 20, "size": 2000, "offloaded": False},
            {"ledgerId": 2, "entries": 0, "size": 0},
        ],
    }
    stats = InternalStats.from_json(body)
    assert stats.current_ledger == LedgerInfo(2, 0, 0, False)
    assert [(x.ledger_id, x.size) for x in stats.ledgers_with_sizes()] == [
        (0, 1000),
        (1, 2000),
        (2, 3000),
    ]
    assert InternalStats.from_json({}).ledgers_with_sizes() == ()


def test_offload_status_and_message_id() -> None:
    status = OffloadStatus.from_json(
        {
            "status": "RUNNING",
            "lastError": "",
            "firstUnoffloadedMessage": {"ledgerId": 5, "entryId": 0, "partitionIndex": -1},
        }
    )
    assert status.state is OffloadState.RUNNING
    assert status.first_unoffloaded == MessageId(5, 0)
    assert MessageId(5, 3).to_json() == {"ledgerId": 5, "entryId": 3, "partitionIndex": -1}
    with pytest.raises(ResponseShapeError, match="NOT_RUN"):
        OffloadStatus.from_json({"status": "DONE"})


def test_hash_positions_normalise_topic_names() -> None:
    parsed = TopicHashPositions.from_json(
        {
            "namespace": "t/ns",
            "bundle": "0x00000000_0x40000000",
            "topicHashPositions": {"t/ns/x-partition-0": 123, "persistent://t/ns/y": "0x10"},
        }
    )
    assert parsed.bundle == BundleRange(0, 0x40000000)
    assert dict(parsed.positions) == {
        "persistent://t/ns/x-partition-0": 123,
        "persistent://t/ns/y": 16,
    }
    with pytest.raises(ResponseShapeError):
        TopicHashPositions.from_json({"namespace": "t/ns", "bundle": "whole"})


def test_cluster_data() -> None:
    data = ClusterData.from_json(
        "a", {"serviceUrl": "http://a:8080", "peerClusterNames": ["b", "c"]}
    )
    assert data.service_url == "http://a:8080" and data.peer_cluster_names == ("b", "c")
    assert ClusterData.from_json("a", {"peerClusterNames": None}).peer_cluster_names == ()


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (401, UnauthorizedError),
        (404, NotFoundError),
        (405, ClientError),
        (409, ConflictError),
        (412, PreconditionFailedError),
        (429, TooManyRequestsError),
        (500, ServerError),
        (503, ServerError),
        (302, PulsarAdminError),
    ],
    ids=lambda v: str(v) if isinstance(v, int) else v.__name__,
)
def test_error_class_by_status(status: int, cls: type[PulsarAdminError]) -> None:
    assert error_class_for(status) is cls
