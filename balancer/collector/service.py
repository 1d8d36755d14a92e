"""The stats collector: broker-stats/topics of every cluster -> topic-stats events -> Kafka.

Each poll asks every target (a cluster's admin URL, or each of its brokers' URLs) for
`GET /admin/v2/broker-stats/topics`, turns each topic's stats into a `TopicStatsEvent` whose
event time is the poll time of that broker, and sends them to a Kafka topic in envelopes
`{"events": [...]}` keyed by the namespace (at most `envelope_max_events` events and
`envelope_max_bytes` bytes each), or one event per message keyed by the topic name
(`envelope_max_events` 0 or 1). No message is ever larger than `envelope_max_bytes`: an
envelope that would be is cut, and an event too large on its own is not sent but counted
(`oversized`) and logged once per topic. A target that fails is counted and retried (after
`retry_s`, until the next poll is due); it never stops the others. An empty answer (a
broker before its first stats update) is "no data yet", and V1 namespace keys (a broker's
heartbeat) are skipped: both are counted, neither is a failure. Clock and sleep are
injected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from balancer.core.envelopes import (
    DEFAULT_ENVELOPE_MAX_BYTES,
    DEFAULT_ENVELOPE_MAX_EVENTS,
    RECORD_OVERHEAD_BYTES,
    Oversized,
    pack,
)
from balancer.core.events import TopicStatsEvent
from balancer.kafka.clients import close_producer

if TYPE_CHECKING:  # kafka-python is imported when a sink connects
    from kafka import KafkaProducer

    from balancer.pulsar.models import BrokerTopicStats

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Target:
    """One broker-stats endpoint: a cluster, and a broker URL (None: the cluster's admin URL)."""

    cluster: str
    broker_url: str | None = None

    @property
    def broker(self) -> str | None:
        """`host:port` of the broker, as the event's `broker` field."""
        if self.broker_url is None:
            return None
        return urlsplit(self.broker_url).netloc or self.broker_url

    def __str__(self) -> str:
        return f"{self.cluster}@{self.broker_url or 'admin'}"


class TopicStatsSample(Protocol):
    """What a fetch yields per topic: anything with `to_event` (balancer.pulsar's TopicStats)."""

    def to_event(
        self, *, cluster: str, topic: str, timestamp_ms: int, broker: str | None = None
    ) -> TopicStatsEvent: ...


@dataclass(frozen=True, slots=True)
class Fetched:
    """One target's answer with what the collector must count besides the samples.

    `skipped_namespaces`: V1 namespace keys the answer held (a broker's heartbeat namespace
    `pulsar/<cluster>/<host:port>`), left out. `no_data`: the broker has no stats snapshot
    yet (an empty answer in the first minute after it starts), which is not a failure.
    """

    samples: Sequence[tuple[str, TopicStatsSample]]
    skipped_namespaces: tuple[str, ...] = ()
    no_data: bool = False


# A fetch returns (full topic name, stats) pairs of one target, or a `Fetched`; raises on
# failure.
Fetch = Callable[[Target], Iterable[tuple[str, TopicStatsSample]] | Fetched]


class CollectorMetrics(Protocol):
    """Where the collector reports what an answer held besides stats (the exporter)."""

    def record_collector_answer(
        self,
        cluster: str,
        *,
        skipped_namespaces: int = 0,
        no_data: bool = False,
        oversized_events: int = 0,
    ) -> None: ...


class EventSink(Protocol):
    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None: ...

    def flush(self) -> None: ...


@dataclass
class CollectorCounts:
    polls: int = 0
    events: int = 0
    messages: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # cluster -> failed fetches
    # cluster -> answers that held no stats yet (a broker before its first stats update)
    no_data: Counter[str] = field(default_factory=Counter)
    # cluster -> V1 namespace keys skipped (each key once per answer holding it)
    skipped_namespaces: Counter[str] = field(default_factory=Counter)
    # cluster -> events not sent: larger than envelope_max_bytes on their own
    oversized: Counter[str] = field(default_factory=Counter)
    last_success_ms: dict[str, int] = field(default_factory=dict)  # cluster -> poll time


class Collector:
    def __init__(
        self,
        *,
        targets: Sequence[Target],
        fetch: Fetch,
        sink: EventSink,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        envelope_max_events: int = DEFAULT_ENVELOPE_MAX_EVENTS,
        envelope_max_bytes: int = DEFAULT_ENVELOPE_MAX_BYTES,
        metrics: CollectorMetrics | None = None,
    ) -> None:
        if not targets:
            raise ValueError("the collector needs at least one cluster to poll")
        if envelope_max_events < 0:
            raise ValueError("envelope_max_events must be >= 0 (0 or 1: one event per message)")
        if envelope_max_bytes <= RECORD_OVERHEAD_BYTES:
            raise ValueError(f"envelope_max_bytes must be > {RECORD_OVERHEAD_BYTES}")
        self.targets = tuple(targets)
        self.fetch = fetch
        self.sink = sink
        self.clock_ms = clock_ms
        self.envelope_max_events = envelope_max_events
        self.envelope_max_bytes = envelope_max_bytes
        self.counts = CollectorCounts()
        self.metrics = metrics
        self._logged_skips: set[tuple[str, str]] = set()  # (cluster, namespace) logged once
        self._logged_oversized: set[tuple[str, str]] = set()  # (cluster, topic) logged once

    def poll_once(self, targets: Sequence[Target] | None = None) -> list[Target]:
        """Poll `targets` (default: all) once; returns the ones that failed."""
        failed = []
        self.counts.polls += 1
        for target in targets or self.targets:
            poll_ms = self.clock_ms()
            try:
                fetched = self.fetch(target)
                if not isinstance(fetched, Fetched):
                    fetched = Fetched(samples=list(fetched))
                events = [
                    stats.to_event(
                        cluster=target.cluster,
                        topic=topic,
                        timestamp_ms=poll_ms,
                        broker=target.broker,
                    )
                    for topic, stats in fetched.samples
                ]
            except Exception as exc:  # a down cluster must never stop the others
                self.counts.failures[target.cluster] += 1
                failed.append(target)
                log.warning("collector: polling %s failed: %s", target, _describe(exc))
                continue
            self._note_skipped(target, fetched.skipped_namespaces)
            oversized = 0 if fetched.no_data else self._send(target.cluster, events)
            if self.metrics is not None:
                self.metrics.record_collector_answer(
                    target.cluster,
                    skipped_namespaces=len(fetched.skipped_namespaces),
                    no_data=fetched.no_data,
                    oversized_events=oversized,
                )
            if fetched.no_data:
                self.counts.no_data[target.cluster] += 1
                log.info("collector: %s has no stats yet (before its first stats update)", target)
                continue
            self.counts.events += len(events) - oversized
            self.counts.last_success_ms[target.cluster] = poll_ms
        self.sink.flush()
        return failed

    def _note_skipped(self, target: Target, namespaces: Sequence[str]) -> None:
        self.counts.skipped_namespaces[target.cluster] += len(namespaces)
        for namespace in namespaces:
            if (target.cluster, namespace) not in self._logged_skips:
                self._logged_skips.add((target.cluster, namespace))
                log.info(
                    "collector: %s reports V1 namespace %s (e.g. the broker's heartbeat): "
                    "skipped, counted, logged once",
                    target,
                    namespace,
                )

    def _send(self, cluster: str, events: Sequence[TopicStatsEvent]) -> int:
        """Send `events` as messages within the caps; returns the events too large to send."""
        oversized = 0
        for item in pack(
            events, max_events=self.envelope_max_events, max_bytes=self.envelope_max_bytes
        ):
            if isinstance(item, Oversized):
                self._note_oversized(cluster, item.event, item.size_bytes)
                oversized += 1
                continue
            self.sink.send(key=item.key, value=item.value, events=item.events)
            self.counts.messages += 1
        return oversized

    def _note_oversized(self, cluster: str, event: TopicStatsEvent, size_bytes: int) -> None:
        self.counts.oversized[cluster] += 1
        if (cluster, event.topic) not in self._logged_oversized:
            self._logged_oversized.add((cluster, event.topic))
            log.warning(
                "collector: the event of %s (%s) needs a message of %d bytes, more than "
                "collector.envelope_max_bytes (%d): not sent, counted, logged once",
                event.topic,
                cluster,
                size_bytes,
                self.envelope_max_bytes,
            )

    def run(
        self,
        *,
        interval_s: float,
        retry_s: float = 10.0,
        should_stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        max_polls: int | None = None,
    ) -> CollectorCounts:
        """Poll every `interval_s`, retrying failed targets every `retry_s` in between."""
        if interval_s <= 0 or retry_s <= 0:
            raise ValueError("interval_s and retry_s must be > 0")
        rounds = 0
        while not should_stop() and (max_polls is None or rounds < max_polls):
            started = monotonic()
            next_poll = started + interval_s
            failed = self.poll_once()
            rounds += 1
            while failed and not should_stop() and monotonic() + retry_s < next_poll:
                sleep(retry_s)
                failed = self.poll_once(failed)
            if max_polls is not None and rounds >= max_polls:
                break
            remaining = next_poll - monotonic()
            if remaining > 0 and not should_stop():
                sleep(remaining)
        return self.counts


def _describe(exc: Exception) -> str:
    # Error texts from the admin client carry no credentials; keep them short.
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class SinkListener(Protocol):
    """Told what became of each event (balancer.ops.exporter.CollectorMetrics has these)."""

    def events_sent(self, count: int) -> None: ...

    def events_failed(self, count: int) -> None: ...

    def events_dropped(self, count: int) -> None: ...

    def producer_rebuilt(self) -> None: ...


@dataclass
class SinkCounts:
    """Events by outcome (see `balancer.ops.exporter.CollectorMetrics`), and producers replaced."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0
    rebuilds: int = 0


# Builds a KafkaProducer: idempotent or not.
ProducerFactory = Callable[[bool], "KafkaProducer"]


class KafkaEventSink:
    """Sends events with kafka-python; idempotent when the broker supports it.

    Every send's result is checked (callbacks count sent and failed events). A producer
    that stops delivering is replaced: kafka-python never leaves a fatal state (e.g. a
    failed InitProducerId after a broker lost its data on restart), so a flush round in
    which nothing was delivered, a flush that timed out or a send that raised closes the
    producer, and the next send builds a new one, after a backoff that doubles up to
    `max_backoff_s` while rebuilding does not help. Events offered meanwhile are dropped
    and counted; the next poll sends fresh stats anyway. Nothing here raises.
    """

    def __init__(
        self,
        producer: KafkaProducer,
        topic: str,
        *,
        factory: ProducerFactory | None = None,
        listener: SinkListener | None = None,
        flush_timeout_s: float = 10.0,
        min_backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.producer: KafkaProducer | None = producer
        self.topic = topic
        self.idempotent = bool(getattr(producer, "config", {}).get("enable_idempotence", False))
        self.counts = SinkCounts()
        self._factory = factory
        self._listener = listener
        self._flush_timeout_s = flush_timeout_s
        self._min_backoff_s = min_backoff_s
        self._max_backoff_s = max_backoff_s
        self._backoff_s = min_backoff_s
        self._monotonic = monotonic
        self._rebuild_at = 0.0
        self._lock = threading.Lock()  # callbacks run on the producer's sender thread
        self._round = SinkCounts()  # outcomes since the last flush
        self._last_round_ok: bool | None = None  # None: no flush yet

    @classmethod
    def connect(
        cls,
        *,
        bootstrap_servers: Sequence[str],
        topic: str,
        client_kwargs: Mapping[str, Any] | None = None,
        idempotent: bool = True,
        listener: SinkListener | None = None,
        max_block_ms: int = 5000,
        max_message_bytes: int = DEFAULT_ENVELOPE_MAX_BYTES,
        compression_type: str | None = None,
    ) -> KafkaEventSink:
        from kafka import KafkaProducer

        kwargs: dict[str, Any] = {
            "bootstrap_servers": list(bootstrap_servers),
            "client_id": "pulsar-balancer-collector",
            "acks": "all",
            "linger_ms": 20,
            "retries": 5,
            # send() waits this long for metadata: short, or an outage stalls every poll.
            "max_block_ms": max_block_ms,
            # The producer refuses records over this (framing included): the collector's cap.
            "max_request_size": max_message_bytes,
            # Record batches compressed as the config says; the cap above counts the
            # uncompressed record, which only makes it stricter than the broker's.
            "compression_type": compression_type,
            **(client_kwargs or {}),
        }

        def build(enable_idempotence: bool, **extra: Any) -> KafkaProducer:
            return KafkaProducer(**{**kwargs, "enable_idempotence": enable_idempotence, **extra})

        def rebuild(enable_idempotence: bool) -> KafkaProducer:
            # Kafka may still be away: wait for it no longer than a send waits for metadata
            # (the default bootstrap wait, 30 s, would stall the polls and the shutdown).
            return build(enable_idempotence, bootstrap_timeout_ms=max_block_ms)

        if idempotent:
            try:
                return cls(build(True), topic, factory=rebuild, listener=listener)
            except Exception as exc:  # e.g. a broker without InitProducerId
                log.warning("idempotent producer not available (%s); falling back", exc)
        return cls(build(False), topic, factory=rebuild, listener=listener)

    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
        producer = self._current_producer()
        if producer is None:
            self._count("dropped", events)
            return
        try:
            future = producer.send(self.topic, key=key, value=value)
        except Exception as exc:  # no metadata within max_block_ms, buffer full, closed
            self._count("dropped", events)
            if _record_error(exc):  # this message's fault, not the producer's
                log.warning("collector: a message of %d events dropped: %s", events, _describe(exc))
            else:
                self._discard(f"send failed: {_describe(exc)}")
            return
        future.add_callback(lambda _meta: self._count("sent", events))
        future.add_errback(lambda _exc: self._count("failed", events))

    def flush(self) -> None:
        """Wait (at most `flush_timeout_s`) for what was sent; replace a producer that failed."""
        producer = self.producer
        timed_out = False
        if producer is not None:
            try:
                producer.flush(timeout=self._flush_timeout_s)
            except Exception as exc:  # KafkaTimeoutError: Kafka did not answer in time
                timed_out = True
                log.warning("collector: flush failed: %s", _describe(exc))
        with self._lock:
            round_, self._round = self._round, SinkCounts()
        ok = not timed_out and round_.failed == 0 and round_.dropped == 0
        self._last_round_ok = ok
        if round_.sent:
            self._backoff_s = self._min_backoff_s
        if self.producer is not None and (timed_out or (round_.failed and not round_.sent)):
            self._discard(
                f"{round_.failed} events failed, none delivered"
                if not timed_out
                else f"flush timed out after {self._flush_timeout_s} s"
            )

    def publishing(self) -> bool:
        """True when the last flush round delivered everything it was given."""
        return bool(self._last_round_ok)

    def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            close_producer(producer)

    # -- producer lifecycle -------------------------------------------------------------
    def _current_producer(self) -> KafkaProducer | None:
        if self.producer is not None or self._factory is None:
            return self.producer
        if self._monotonic() < self._rebuild_at:
            return None
        try:
            self.producer = self._factory(self.idempotent)
        except Exception as exc:  # Kafka still down: wait longer before the next try
            self._schedule_rebuild(f"rebuilding the producer failed: {_describe(exc)}")
            return None
        self.counts.rebuilds += 1
        if self._listener is not None:
            self._listener.producer_rebuilt()
        log.info("collector: Kafka producer rebuilt")
        return self.producer

    def _discard(self, why: str) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            # Undelivered records fail their futures here: counted as failed.
            close_producer(producer, timeout_s=0)
        self._schedule_rebuild(why)

    def _schedule_rebuild(self, why: str) -> None:
        delay_s = self._backoff_s
        self._backoff_s = min(self._max_backoff_s, self._backoff_s * 2)
        self._rebuild_at = self._monotonic() + delay_s
        log.warning("collector: Kafka producer discarded (%s); a new one in %.0f s", why, delay_s)

    def _count(self, outcome: str, events: int) -> None:
        with self._lock:
            setattr(self.counts, outcome, getattr(self.counts, outcome) + events)
            setattr(self._round, outcome, getattr(self._round, outcome) + events)
        if self._listener is not None:
            getattr(self._listener, f"events_{outcome}")(events)


def _record_error(exc: Exception) -> bool:
    from kafka.errors import MessageSizeTooLargeError

    return isinstance(exc, (MessageSizeTooLargeError, ValueError, TypeError))


class BrokerStatsSource(Protocol):
    """What the collector asks: `balancer.pulsar.PulsarPeerGroup` is one."""

    def broker_topic_stats(
        self, cluster: str, broker_url: str | None = None
    ) -> BrokerTopicStats: ...


def admin_fetch(peer_group: BrokerStatsSource) -> Fetch:
    """A `Fetch` over `balancer.pulsar.PulsarPeerGroup.broker_topic_stats`."""

    def fetch(target: Target) -> Fetched:
        stats = peer_group.broker_topic_stats(target.cluster, target.broker_url)
        return Fetched(
            samples=[(entry.topic, entry.stats) for entry in stats],
            skipped_namespaces=stats.skipped_namespaces,
            no_data=stats.no_data,
        )

    return fetch


def targets_for(clusters: Mapping[str, Sequence[str]]) -> list[Target]:
    """Targets from cluster -> broker URLs (an empty list: poll the cluster's admin URL)."""
    out: list[Target] = []
    for cluster, brokers in clusters.items():
        if brokers:
            out.extend(Target(cluster, url.rstrip("/")) for url in brokers)
        else:
            out.append(Target(cluster))
    return out
