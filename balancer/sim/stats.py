"""Pulsar-shaped JSON for one topic: topic stats, internal stats (ledgers) and offload status.

Builds plain dicts from a `TopicSnapshot` of numbers; no state, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Ledger:
    ledger_id: int
    entries: int
    size_bytes: int
    offloaded: bool


@dataclass(frozen=True)
class TopicSnapshot:
    """Everything the stats of one topic at one instant are made of."""

    full_name: str
    now_ms: int
    start_ms: int
    owner_broker: str  # host:port
    msg_rate_in: float
    msg_rate_out: float
    throughput_in: float  # bytes/s
    throughput_out: float  # bytes/s
    msg_size_bytes: float
    producers: int
    subscriptions: int
    consumers_per_subscription: int
    bytes_in_total: int  # bytes written since the scenario started
    storage_size_bytes: int
    offloaded_size_bytes: int
    backlog_size_bytes: int
    last_offload_ledger_id: int
    last_offload_success_ms: int


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def _publishers(s: TopicSnapshot) -> list[dict[str, Any]]:
    n = s.producers
    if n <= 0:
        return []
    return [
        {
            "accessMode": "Shared",
            "msgRateIn": s.msg_rate_in / n,
            "msgThroughputIn": s.throughput_in / n,
            "averageMsgSize": s.msg_size_bytes,
            "chunkedMessageRate": 0.0,
            "producerId": k,
            "producerName": f"sim-producer-{k}",
            "address": f"/127.0.0.1:{40000 + k}",
            "connectedSince": _iso(s.start_ms),
            "clientVersion": "pulsar-balancer-sim",
            "metadata": {},
        }
        for k in range(n)
    ]


def _subscriptions(s: TopicSnapshot) -> dict[str, Any]:
    n = s.subscriptions
    if n <= 0:
        return {}
    rate = s.msg_rate_out / n
    throughput = s.throughput_out / n
    consumers = s.consumers_per_subscription
    backlog_msgs = int(s.backlog_size_bytes / s.msg_size_bytes) if s.msg_size_bytes else 0
    out_msgs = int(s.bytes_in_total / s.msg_size_bytes) if s.msg_size_bytes else 0
    subs: dict[str, Any] = {}
    for j in range(n):
        subs[f"sub-{j}"] = {
            "msgRateOut": rate,
            "msgThroughputOut": throughput,
            "bytesOutCounter": s.bytes_in_total if consumers else 0,
            "msgOutCounter": out_msgs if consumers else 0,
            "msgRateRedeliver": 0.0,
            "msgBacklog": backlog_msgs,
            "backlogSize": s.backlog_size_bytes,
            "msgRateExpired": 0.0,
            "type": "Shared",
            "isDurable": True,
            "isReplicated": False,
            "consumers": [
                {
                    "consumerName": f"sim-consumer-{j}-{c}",
                    "msgRateOut": rate / consumers,
                    "msgThroughputOut": throughput / consumers,
                    "availablePermits": 1000,
                    "unackedMessages": 0,
                    "blockedConsumerOnUnackedMsgs": False,
                    "address": f"/127.0.0.1:{50000 + c}",
                    "connectedSince": _iso(s.start_ms),
                    "clientVersion": "pulsar-balancer-sim",
                    "metadata": {},
                }
                for c in range(consumers)
            ],
        }
    return subs


def topic_stats(s: TopicSnapshot) -> dict[str, Any]:
    """`GET .../{topic}/stats`, as Pulsar's `PersistentTopic.asyncGetStats` fills
    `TopicStatsImpl`: `storageSize` is `ManagedLedgerImpl.getTotalSize()` (offloaded ledgers
    included) and `offloadedStorageSize` is `ManagedLedgerImpl.getOffloadedSize()`; only this
    answer has the latter."""
    msgs_in = int(s.bytes_in_total / s.msg_size_bytes) if s.msg_size_bytes else 0
    return {
        "msgRateIn": s.msg_rate_in,
        "msgThroughputIn": s.throughput_in,
        "msgRateOut": s.msg_rate_out,
        "msgThroughputOut": s.throughput_out,
        "bytesInCounter": s.bytes_in_total,
        "msgInCounter": msgs_in,
        "bytesOutCounter": s.bytes_in_total if s.consumers_per_subscription else 0,
        "msgOutCounter": msgs_in if s.consumers_per_subscription else 0,
        "averageMsgSize": s.msg_size_bytes,
        "msgChunkPublished": False,
        "storageSize": s.storage_size_bytes,
        "backlogSize": s.backlog_size_bytes,
        "publishRateLimitedTimes": 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": s.offloaded_size_bytes,
        "lastOffloadLedgerId": s.last_offload_ledger_id,
        "lastOffloadSuccessTimeStamp": s.last_offload_success_ms,
        "lastOffloadFailureTimeStamp": 0,
        "ongoingTxnCount": 0,
        "abortedTxnCount": 0,
        "committedTxnCount": 0,
        "publishers": _publishers(s),
        "waitingPublishers": 0,
        "subscriptions": _subscriptions(s),
        "replication": {},
        "deduplicationStatus": "Disabled",
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": 0,
        "compaction": {
            "lastCompactionRemovedEventCount": 0,
            "lastCompactionSucceedTimestamp": 0,
            "lastCompactionFailedTimestamp": 0,
            "lastCompactionDurationTimeInMills": 0,
        },
        "ownerBroker": s.owner_broker,
    }


def broker_topic_stats(s: TopicSnapshot, *, expose_publishers: bool = True) -> dict[str, Any]:
    """One topic inside `broker-stats/topics`, the keys Pulsar's `PersistentTopic.updateRates`
    writes into the broker's stats snapshot: no `offloadedStorageSize`, no `ownerBroker`;
    `storageSize` is `ManagedLedgerImpl.getTotalSize()` (offloaded ledgers still counted);
    `publishers` stays empty when the broker runs with `exposePublisherStats=false`, while
    `producerCount` always counts the producers."""
    msgs_in = int(s.bytes_in_total / s.msg_size_bytes) if s.msg_size_bytes else 0
    subscriptions = {
        name: {
            "consumers": sub["consumers"],
            "msgBacklog": sub["msgBacklog"],
            "msgRateExpired": sub["msgRateExpired"],
            "msgRateOut": sub["msgRateOut"],
            "messageAckRate": sub["msgRateOut"],
            "msgThroughputOut": sub["msgThroughputOut"],
            "msgRateRedeliver": sub["msgRateRedeliver"],
            "numberOfEntriesSinceFirstNotAckedMessage": 1,
            "totalNonContiguousDeletedMessagesRange": 0,
            "type": sub["type"],
        }
        for name, sub in _subscriptions(s).items()
    }
    return {
        "publishers": _publishers(s) if expose_publishers else [],
        "replication": {},
        "subscriptions": subscriptions,
        "producerCount": s.producers,
        "averageMsgSize": s.msg_size_bytes if s.msg_rate_in else 0.0,
        "msgRateIn": s.msg_rate_in,
        "msgRateOut": s.msg_rate_out,
        "msgInCount": msgs_in,
        "bytesInCount": s.bytes_in_total,
        "msgOutCount": msgs_in if s.consumers_per_subscription else 0,
        "bytesOutCount": s.bytes_in_total if s.consumers_per_subscription else 0,
        "msgThroughputIn": s.throughput_in,
        "msgThroughputOut": s.throughput_out,
        "storageSize": s.storage_size_bytes,
        "backlogSize": s.backlog_size_bytes,
        "pendingAddEntriesCount": 0,
        "filteredEntriesCount": 0,
    }


def heartbeat_stats(cluster: str, broker_address: str, version: str = "V1") -> dict[str, Any]:
    """The broker's heartbeat namespace in `broker-stats/topics`: V1 `pulsar/<cluster>/
    <host:port>` (NamespaceService.getHeartbeatNamespace; keyed by NamespaceName.toString())
    or, for a health check with topicVersion V2, `pulsar/<host:port>`
    (NamespaceService.getHeartbeatNamespaceV2, HEARTBEAT_NAMESPACE_FMT_V2), with one full
    bundle holding the health-check topic `brokers healthcheck` writes to."""
    if version == "V2":
        namespace = f"pulsar/{broker_address}"
    else:
        namespace = f"pulsar/{cluster}/{broker_address}"
    topic = f"persistent://{namespace}/healthcheck"
    return {namespace: {"0x00000000_0xffffffff": {"persistent": {topic: _idle_topic()}}}}


def _idle_topic() -> dict[str, Any]:
    # One message written and read by the health check; no producer or consumer left.
    return {
        "publishers": [],
        "replication": {},
        "subscriptions": {},
        "producerCount": 0,
        "averageMsgSize": 0.0,
        "msgRateIn": 0.0,
        "msgRateOut": 0.0,
        "msgInCount": 1,
        "bytesInCount": 16,
        "msgOutCount": 1,
        "bytesOutCount": 16,
        "msgThroughputIn": 0.0,
        "msgThroughputOut": 0.0,
        "storageSize": 16,
        "backlogSize": 0,
        "pendingAddEntriesCount": 0,
        "filteredEntriesCount": 0,
    }


def internal_stats(
    *, ledgers: list[Ledger], current_ledger_size: int, now_ms: int, subscriptions: int
) -> dict[str, Any]:
    """`GET .../{topic}/internalStats`: ledgers oldest first; the last one is the current
    ledger, whose `size` and `entries` are not filled in (see `currentLedgerSize`)."""
    current = ledgers[-1]
    total_entries = sum(x.entries for x in ledgers)
    last_confirmed = f"{current.ledger_id}:{current.entries - 1}"
    return {
        "entriesAddedCounter": total_entries,
        "numberOfEntries": total_entries,
        "totalSize": sum(x.size_bytes for x in ledgers[:-1]) + current_ledger_size,
        "currentLedgerEntries": current.entries,
        "currentLedgerSize": current_ledger_size,
        "lastLedgerCreatedTimestamp": _iso(now_ms),
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": last_confirmed,
        "state": "LedgerOpened",
        "schemaLedgers": [],
        "compactedLedger": {
            "ledgerId": -1,
            "entries": -1,
            "size": -1,
            "offloaded": False,
            "underReplicated": False,
        },
        "ledgers": [
            {
                "ledgerId": x.ledger_id,
                "entries": 0 if i == len(ledgers) - 1 else x.entries,
                "size": 0 if i == len(ledgers) - 1 else x.size_bytes,
                "offloaded": x.offloaded,
                "underReplicated": False,
            }
            for i, x in enumerate(ledgers)
        ],
        "cursors": {
            f"sub-{j}": {
                "markDeletePosition": last_confirmed,
                "readPosition": f"{current.ledger_id}:{current.entries}",
                "waitingReadOp": True,
                "pendingReadOps": 0,
                "messagesConsumedCounter": total_entries,
                "cursorLedger": -1,
                "state": "Open",
                "active": True,
            }
            for j in range(subscriptions)
        },
    }
