"""What the collector takes and gives: a fetch's answer (`Fetched`), and the ports it reports
to (events, dead letters, metrics, broker loads, round contexts).
`balancer.collector.service` runs the rounds over them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from balancer.collector.targets import Target
from balancer.core.broker_load import BrokerLoadReport
from balancer.core.events import TopicStatsEvent


class TopicStatsSample(Protocol):
    """What a fetch yields per topic: anything with `to_event` (balancer.pulsar's TopicStats)."""

    def to_event(
        self, *, cluster: str, topic: str, timestamp_ms: int, broker: str | None = None
    ) -> TopicStatsEvent: ...


@dataclass(frozen=True, slots=True)
class Fetched:
    """One target's answer with what the collector must count besides the samples.

    `skipped_namespaces`: V1 namespace keys the answer held (a broker's heartbeat namespace
    `pulsar/<cluster>/<host:port>`) and the V2 heartbeat `pulsar/<host:port>`, left out.
    `no_data`: the broker has no stats snapshot yet (an empty answer in the first minute
    after it starts), which is not a failure.
    `rejected`: malformed topic entries left out alone.
    """

    samples: Sequence[tuple[str, TopicStatsSample]]
    skipped_namespaces: tuple[str, ...] = ()
    no_data: bool = False
    # Topic entries left out of the answer (the rest is used): dead-lettered and counted.
    rejected: Sequence[RejectedSample] = ()
    # The broker's load report read in the same round (None: not read or not answered).
    broker_load: BrokerLoadReport | None = None
    # "tenant/ns/0x.._0x.." the broker reported (its bundles with topics).
    owned_bundles: frozenset[str] = frozenset()


class RejectedSample(Protocol):
    """One malformed topic entry of an answer (`balancer.pulsar.RejectedTopicEntry`)."""

    @property
    def topic(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def detail(self) -> str: ...

    @property
    def excerpt(self) -> str: ...


class DeadLetterOut(Protocol):
    """Where rejected topic entries go: the stream's dead-letter topic (`KafkaEventSink`)."""

    def dead_letter(
        self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> None: ...


# A fetch returns (full topic name, stats) pairs of one target, or a `Fetched`; raises on
# failure.
Fetch = Callable[[Target], Iterable[tuple[str, TopicStatsSample]] | Fetched]


class CollectorMetricsSink(Protocol):
    """Where the collector reports its polls and what an answer held besides stats."""

    def record_collector_answer(
        self,
        cluster: str,
        *,
        skipped_namespaces: int = 0,
        no_data: bool = False,
        oversized_events: int = 0,
        rejected_entries: Mapping[str, int] | None = None,
    ) -> None: ...

    def record_poll(self, cluster: str, broker: str, *, failure: str | None, at_s: float) -> None:
        """One target's poll: `failure` None when it was read, else a `PollFailure` value."""

    def set_brokers(self, cluster: str, brokers: Sequence[str], *, partial: bool = False) -> None:
        """The brokers (labels) of `cluster` polled now; others' series vanish. `partial`:
        polled through the admin URL alone, its brokers never listed."""

    def context_publish_failed(self, reason: str) -> None:
        """A round's context record not published, for `reason` (a `ContextPublishFailure`)."""


class BrokerLoadOut(Protocol):
    """Where each broker's poll goes for balancing the brokers
    (`balancer.controller.broker_board.BrokerLoadBoard`)."""

    def record_poll(
        self,
        cluster: str,
        broker: str,
        *,
        poll_ms: int,
        report: BrokerLoadReport | None,
        owned_bundles: frozenset[str],
    ) -> None: ...


class ContextTooLarge(ValueError):
    """A context record refused for its size before it was handed to Kafka."""


class ContextOut(Protocol):
    """Where each round's context record goes (`KafkaEventSink.publish_context`: the
    `kafka.context_topic`). May raise (`ContextTooLarge` for a record over the producer's
    size): the collector counts and logs it."""

    def publish_context(self, *, key: bytes, value: bytes, timestamp_ms: int) -> None: ...


class EventSink(Protocol):
    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None: ...

    def flush(self) -> None: ...
