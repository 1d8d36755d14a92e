"""Typed admin API responses, parsed from Pulsar's JSON.

Each `from_json` raises `ResponseShapeError` (a ValueError) on a body that is not what Pulsar
sends; the client turns it into `InvalidResponseError` with the method and URL. The exception:
one malformed topic entry of a broker-stats answer is rejected alone
(`BrokerTopicStats.rejected`). Optional numbers Pulsar may leave out default to 0. Field names
are snake_case; sizes are bytes and throughputs bytes/s, as in `balancer.core.load`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from balancer.core.bundles import BundleRange, InvalidBundle, parse_position
from balancer.core.events import RejectReason, TopicStatsEvent
from balancer.core.offload import MessageId as MessageId  # the core type, re-exported
from balancer.core.topics import InvalidTopicName, TopicDomain, parse_topic
from balancer.pulsar.parsing import (
    ResponseShapeError as ResponseShapeError,  # re-exported: callers catch it from here
)
from balancer.pulsar.parsing import (
    bundle_range,
    integer,
    json_object,
    number,
    or_empty,
    string,
    string_list,
    topic_name,
)
from balancer.pulsar.parsing import parse_string_list as parse_string_list  # re-exported


def parse_message_id(body: Any) -> MessageId:
    """Pulsar's `{"ledgerId", "entryId", "partitionIndex"}` as the core's MessageId."""
    obj = json_object(body, "message id")
    return MessageId(
        ledger_id=integer(obj, "ledgerId", "message id", default=-1),
        entry_id=integer(obj, "entryId", "message id", default=-1),
        partition_index=integer(obj, "partitionIndex", "message id", default=-1),
    )


@dataclass(frozen=True, slots=True)
class TopicHashPositions:
    """PIP-143 answer: the hash position of each topic asked for, within one bundle."""

    namespace: str
    bundle: BundleRange
    positions: Mapping[str, int] = field(compare=False)

    @classmethod
    def from_json(cls, body: Any) -> TopicHashPositions:
        obj = json_object(body, "topicHashPositions response")
        raw = json_object(or_empty(obj.get("topicHashPositions")), "topicHashPositions")
        positions: dict[str, int] = {}
        for name, value in raw.items():
            try:
                positions[topic_name(name, "topicHashPositions")] = parse_position(value)
            except InvalidBundle as exc:
                raise ResponseShapeError(f"topicHashPositions[{name!r}]: {exc}") from None
        return cls(
            namespace=string(obj, "namespace", "topicHashPositions response"),
            bundle=bundle_range(obj.get("bundle"), "topicHashPositions response bundle"),
            positions=MappingProxyType(positions),
        )


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    consumer_count: int
    msg_backlog: int
    msg_rate_out: float
    msg_throughput_out: float  # bytes/s

    @classmethod
    def from_json(cls, body: Any, what: str) -> SubscriptionStats:
        obj = json_object(body, what, RejectReason.WRONG_TYPE)  # a field of a topic's stats
        consumers = obj.get("consumers", [])
        if consumers is None:
            consumers = []
        if not isinstance(consumers, list):
            raise ResponseShapeError(f"{what}.consumers must be a JSON array")
        return cls(
            consumer_count=len(consumers),
            msg_backlog=integer(obj, "msgBacklog", what),
            msg_rate_out=number(obj, "msgRateOut", what),
            msg_throughput_out=number(obj, "msgThroughputOut", what),
        )


@dataclass(frozen=True, slots=True)
class TopicStats:
    """`GET .../{topic}/stats` (and each entry of broker-stats/topics)."""

    msg_rate_in: float
    msg_rate_out: float
    msg_throughput_in: float  # bytes/s
    msg_throughput_out: float  # bytes/s
    average_msg_size: float  # bytes
    storage_size: int  # bytes
    backlog_size: int  # bytes
    offloaded_storage_size: int  # bytes
    # Pulsar's `producerCount` (TopicStatsImpl); `publishers` is empty when the broker runs
    # with exposePublisherStats=false, so its length is only a fallback for old answers.
    publisher_count: int
    subscriptions: Mapping[str, SubscriptionStats] = field(compare=False)

    @classmethod
    def from_json(cls, body: Any, what: str = "topic stats") -> TopicStats:
        obj = json_object(body, what)
        publishers = obj.get("publishers", [])
        if publishers is None:
            publishers = []
        if not isinstance(publishers, list):
            raise ResponseShapeError(f"{what}.publishers must be a JSON array")
        subs_raw = json_object(
            or_empty(obj.get("subscriptions")), f"{what}.subscriptions", RejectReason.WRONG_TYPE
        )
        subs = {
            name: SubscriptionStats.from_json(sub, f"{what}.subscriptions[{name!r}]")
            for name, sub in subs_raw.items()
        }
        return cls(
            msg_rate_in=number(obj, "msgRateIn", what),
            msg_rate_out=number(obj, "msgRateOut", what),
            msg_throughput_in=number(obj, "msgThroughputIn", what),
            msg_throughput_out=number(obj, "msgThroughputOut", what),
            average_msg_size=number(obj, "averageMsgSize", what),
            storage_size=integer(obj, "storageSize", what),
            backlog_size=integer(obj, "backlogSize", what),
            offloaded_storage_size=integer(obj, "offloadedStorageSize", what),
            publisher_count=integer(obj, "producerCount", what, default=len(publishers)),
            subscriptions=MappingProxyType(subs),
        )

    @property
    def consumer_count(self) -> int:
        return sum(s.consumer_count for s in self.subscriptions.values())

    def to_event(
        self, *, cluster: str, topic: str, timestamp_ms: int, broker: str | None = None
    ) -> TopicStatsEvent:
        """The stats event a collector publishes for this sample (`topic` a full name).

        Negative sizes from a confused broker are clamped to 0 so the event stays valid.
        """
        return TopicStatsEvent(
            cluster=cluster,
            topic=topic,
            timestamp_ms=timestamp_ms,
            msgRateIn=max(0.0, self.msg_rate_in),
            msgRateOut=max(0.0, self.msg_rate_out),
            msgThroughputIn=max(0.0, self.msg_throughput_in),
            msgThroughputOut=max(0.0, self.msg_throughput_out),
            storageSize=max(0, self.storage_size),
            backlogSize=max(0, self.backlog_size),
            offloadedStorageSize=max(0, self.offloaded_storage_size),
            producerCount=self.publisher_count,
            consumerCount=self.consumer_count,
            broker=broker,
        )


@dataclass(frozen=True, slots=True)
class BrokerTopicStatsEntry:
    namespace: str  # tenant/ns
    bundle: BundleRange
    domain: TopicDomain
    topic: str  # full name
    stats: TopicStats


# The longest text a rejected entry keeps (its topic key, detail and excerpt): enough to find
# and read the entry, bounded so one huge value cannot bloat a dead-letter record or a log.
REJECTED_TEXT_MAX_CHARS = 512
# A broker's V2 heartbeat namespace `pulsar/<host:port>` (NamespaceService's
# HEARTBEAT_NAMESPACE_FMT_V2, recognised by its HEARTBEAT_NAMESPACE_PATTERN_V2): the broker's
# own health check, made instead of the V1 one when it runs with topicVersion=V2.
HEARTBEAT_NAMESPACE_V2 = re.compile(r"pulsar/[^:/]+:\d+")


def skipped_namespace(namespace: str) -> bool:
    """A broker-stats namespace key that is no user load: a V1 key `tenant/cluster/ns` (the
    V1 heartbeat `pulsar/<cluster>/<host:port>` among them) or the V2 heartbeat."""
    if namespace.count("/") == 2 and all(namespace.split("/")):
        return True
    return HEARTBEAT_NAMESPACE_V2.fullmatch(namespace) is not None


def _bounded(text: str) -> str:
    if len(text) <= REJECTED_TEXT_MAX_CHARS:
        return text
    return text[: REJECTED_TEXT_MAX_CHARS - 3] + "..."


def _excerpt(raw: Any) -> str:
    """The entry's own scalar fields as JSON (its lists and maps, publishers and
    subscriptions, left out: they would fill the bound before the numbers), bounded. A bare
    NaN stays `NaN`: the excerpt shows what the broker sent."""
    if isinstance(raw, list):
        return f"a JSON array of {len(raw)} items"
    if isinstance(raw, Mapping):
        raw = {k: v for k, v in raw.items() if not isinstance(v, Mapping | list)}
    return _bounded(json.dumps(raw, separators=(",", ":"), default=repr))


def _filed_topic(key: str, namespace: str, domain: TopicDomain) -> str:
    """The full name of a topic key, which must belong to the namespace and domain it is
    filed under (the bundle it is counted in)."""
    try:
        name = parse_topic(key)
    except InvalidTopicName as exc:
        raise ResponseShapeError(f"broker-stats topic: {exc}", RejectReason.INVALID_TOPIC) from None
    if name.namespace_name != namespace or name.domain is not domain:
        raise ResponseShapeError(
            f"broker-stats topic {name.full} is filed under {domain.value} {namespace}",
            RejectReason.INVALID_TOPIC,
        )
    return name.full


@dataclass(frozen=True, slots=True)
class RejectedTopicEntry:
    """One topic entry of a broker-stats answer left out, and why; the rest is used.

    `topic`: the key as the broker wrote it (a full name, unless the key is the fault).
    `reason`: from the stream's fixed set (`RejectReason`: not_finite, wrong_type,
    not_an_object, invalid_topic), so it can label a metric. `detail`: a sentence naming the
    field and its value. `excerpt`: the entry's scalar fields as JSON. The three texts are
    at most REJECTED_TEXT_MAX_CHARS long.
    """

    cluster: str
    namespace: str  # tenant/ns
    bundle: BundleRange
    domain: TopicDomain
    topic: str
    reason: RejectReason
    detail: str
    excerpt: str


@dataclass(frozen=True, slots=True)
class BrokerTopicStats:
    """`GET /admin/v2/broker-stats/topics`, flattened: one entry per topic.

    `skipped_namespaces`: V1 namespace keys (`tenant/cluster/ns`, e.g. a broker's heartbeat
    namespace `pulsar/<cluster>/<host:port>`) and the V2 heartbeat `pulsar/<host:port>`,
    left out. `rejected`: topic entries that are
    malformed (a NaN rate, a wrong type, a topic key that is no topic name), left out one by
    one. `no_data`: the broker answered with an empty body, as it does until its first stats
    update (PulsarStats.updateStats runs statsUpdateInitialDelayInSecs after start): no data
    yet, not an error.
    """

    cluster: str
    entries: tuple[BrokerTopicStatsEntry, ...]
    skipped_namespaces: tuple[str, ...] = ()
    no_data: bool = False
    rejected: tuple[RejectedTopicEntry, ...] = ()

    def __iter__(self) -> Iterator[BrokerTopicStatsEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def namespaces(self) -> frozenset[str]:
        return frozenset(e.namespace for e in self.entries)

    def by_bundle(self, namespace: str) -> dict[BundleRange, tuple[BrokerTopicStatsEntry, ...]]:
        out: dict[BundleRange, list[BrokerTopicStatsEntry]] = {}
        for e in self.entries:
            if e.namespace == namespace:
                out.setdefault(e.bundle, []).append(e)
        return {bundle: tuple(items) for bundle, items in out.items()}

    @classmethod
    def from_json(cls, cluster: str, body: Any) -> BrokerTopicStats:
        """From `{"tenant/ns": {"0x..._0x...": {"persistent": {"<topic>": {stats}}}}}`.

        Two levels. The structure above the topic entries (the body, namespace keys, bundle
        keys, domain keys, each level an object) comes from the broker's own NamespaceName
        and bundle strings: wrong there, the answer is not broker-stats/topics and
        ResponseShapeError fails it whole. A V1 namespace key (`tenant/cluster/ns`) and the
        V2 heartbeat are skipped and listed in `skipped_namespaces`. One topic entry (its key
        and its stats) is a sample: a malformed one is listed in `rejected` and the others are used.
        """
        entries: list[BrokerTopicStatsEntry] = []
        rejected: list[RejectedTopicEntry] = []
        skipped: list[str] = []
        for namespace, bundles in json_object(body, "broker-stats/topics").items():
            if skipped_namespace(namespace):
                skipped.append(namespace)
                continue
            if namespace.count("/") != 1:
                raise ResponseShapeError(f"broker-stats/topics: bad namespace key {namespace!r}")
            for bundle_text, domains in json_object(bundles, f"broker-stats[{namespace}]").items():
                bundle = bundle_range(bundle_text, f"broker-stats[{namespace}]")
                for domain_text, topics in json_object(
                    domains, f"broker-stats[{bundle_text}]"
                ).items():
                    try:
                        domain = TopicDomain(domain_text)
                    except ValueError:
                        raise ResponseShapeError(
                            f"broker-stats[{namespace}][{bundle_text}]: unknown domain "
                            f"{domain_text!r}"
                        ) from None
                    for topic, stats in json_object(topics, f"broker-stats[{domain_text}]").items():
                        try:
                            full = _filed_topic(topic, namespace, domain)
                            parsed = TopicStats.from_json(stats, f"broker-stats[{full}]")
                        except ResponseShapeError as exc:
                            rejected.append(
                                RejectedTopicEntry(
                                    cluster=cluster,
                                    namespace=namespace,
                                    bundle=bundle,
                                    domain=domain,
                                    topic=_bounded(topic),
                                    reason=exc.reason,
                                    detail=_bounded(str(exc)),
                                    excerpt=_excerpt(stats),
                                )
                            )
                            continue
                        entries.append(
                            BrokerTopicStatsEntry(
                                namespace=namespace,
                                bundle=bundle,
                                domain=domain,
                                topic=full,
                                stats=parsed,
                            )
                        )
        return cls(
            cluster=cluster,
            entries=tuple(entries),
            skipped_namespaces=tuple(skipped),
            rejected=tuple(rejected),
        )

    @classmethod
    def not_yet(cls, cluster: str) -> BrokerTopicStats:
        """The empty answer of a broker before its first stats update."""
        return cls(cluster=cluster, entries=(), no_data=True)


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int  # bytes; 0 for the current ledger in Pulsar's answer
    offloaded: bool

    @classmethod
    def from_json(cls, body: Any, what: str) -> LedgerInfo:
        obj = json_object(body, what)
        offloaded = obj.get("offloaded", False)
        if not isinstance(offloaded, bool):
            raise ResponseShapeError(f"{what}.offloaded must be a boolean")
        return cls(
            ledger_id=integer(obj, "ledgerId", what, default=-1),
            entries=integer(obj, "entries", what),
            size=integer(obj, "size", what),
            offloaded=offloaded,
        )


@dataclass(frozen=True, slots=True)
class InternalStats:
    """`GET .../{topic}/internalStats`: the managed ledger, oldest ledger first."""

    number_of_entries: int
    total_size: int  # bytes
    current_ledger_entries: int
    current_ledger_size: int  # bytes
    ledgers: tuple[LedgerInfo, ...]

    @classmethod
    def from_json(cls, body: Any) -> InternalStats:
        what = "internal stats"
        obj = json_object(body, what)
        raw = obj.get("ledgers", [])
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            raise ResponseShapeError(f"{what}.ledgers must be a JSON array")
        return cls(
            number_of_entries=integer(obj, "numberOfEntries", what),
            total_size=integer(obj, "totalSize", what),
            current_ledger_entries=integer(obj, "currentLedgerEntries", what),
            current_ledger_size=integer(obj, "currentLedgerSize", what),
            ledgers=tuple(
                LedgerInfo.from_json(item, f"{what}.ledgers[{i}]") for i, item in enumerate(raw)
            ),
        )

    @property
    def current_ledger(self) -> LedgerInfo | None:
        return self.ledgers[-1] if self.ledgers else None

    def ledgers_with_sizes(self) -> tuple[LedgerInfo, ...]:
        """The ledgers with the current (last) one's size taken from `currentLedgerSize`.

        Pulsar does not fill in the open ledger's `size`; this is what an offload-by-size
        computation must walk.
        """
        if not self.ledgers:
            return ()
        *closed, current = self.ledgers
        return (*closed, replace(current, size=self.current_ledger_size))


class OffloadState(StrEnum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class OffloadStatus:
    """`GET .../{topic}/offload`."""

    state: OffloadState
    last_error: str
    first_unoffloaded: MessageId | None = None

    @classmethod
    def from_json(cls, body: Any) -> OffloadStatus:
        what = "offload status"
        obj = json_object(body, what)
        text = string(obj, "status", what)
        try:
            state = OffloadState(text)
        except ValueError:
            raise ResponseShapeError(
                f"{what}.status {text!r} is not one of {', '.join(s.value for s in OffloadState)}"
            ) from None
        first = obj.get("firstUnoffloadedMessage")
        return cls(
            state=state,
            last_error=string(obj, "lastError", what),
            first_unoffloaded=parse_message_id(first) if first is not None else None,
        )


@dataclass(frozen=True, slots=True)
class ClusterData:
    """`GET /admin/v2/clusters/{cluster}`."""

    name: str
    service_url: str
    service_url_tls: str
    broker_service_url: str
    broker_service_url_tls: str
    peer_cluster_names: tuple[str, ...]

    @classmethod
    def from_json(cls, name: str, body: Any) -> ClusterData:
        what = f"cluster {name}"
        obj = json_object(body, what)
        return cls(
            name=name,
            service_url=string(obj, "serviceUrl", what),
            service_url_tls=string(obj, "serviceUrlTls", what),
            broker_service_url=string(obj, "brokerServiceUrl", what),
            broker_service_url_tls=string(obj, "brokerServiceUrlTls", what),
            peer_cluster_names=string_list(obj.get("peerClusterNames"), f"{what}.peerClusterNames"),
        )
