"""The collector's Kafka side: events to the stats topic, with every send's result checked;
rejected topic entries to the dead-letter topic, round contexts to the context topic."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from balancer.collector.ports import ContextTooLarge
from balancer.core.context_record import ContextPublishFailure
from balancer.core.envelopes import DEFAULT_ENVELOPE_MAX_BYTES
from balancer.kafka.clients import close_producer

if TYPE_CHECKING:  # kafka-python is imported when a sink connects
    from kafka import KafkaProducer

log = logging.getLogger(__name__)


def _describe(exc: Exception) -> str:
    # Error texts carry no credentials; keep them short.
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class SinkListener(Protocol):
    """Told what became of each event (`balancer.ops.collector_metrics.CollectorMetrics`
    has these)."""

    def events_sent(self, count: int) -> None: ...

    def events_failed(self, count: int) -> None: ...

    def events_dropped(self, count: int) -> None: ...

    def producer_rebuilt(self) -> None: ...

    def context_publish_failed(self, reason: str) -> None: ...


@dataclass
class SinkCounts:
    """Events by outcome (see `balancer.ops.collector_metrics.CollectorMetrics`), and
    producers replaced."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0
    rebuilds: int = 0
    dead_letters_lost: int = 0  # rejected topic entries Kafka did not take (logged)
    contexts_lost: int = 0  # context records handed over that Kafka did not take (logged)


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
        self.dead_letter_topic: str | None = None  # where `dead_letter` sends
        self.context_topic: str | None = None  # where `publish_context` sends
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
        dead_letter_topic: str | None = None,
        context_topic: str | None = None,
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

        sink: KafkaEventSink | None = None
        if idempotent:
            try:
                sink = cls(build(True), topic, factory=rebuild, listener=listener)
            except Exception as exc:  # e.g. a broker without InitProducerId
                log.warning("idempotent producer not available (%s); falling back", exc)
        if sink is None:
            sink = cls(build(False), topic, factory=rebuild, listener=listener)
        sink.dead_letter_topic = dead_letter_topic
        sink.context_topic = context_topic
        return sink

    def publish_context(self, *, key: bytes, value: bytes, timestamp_ms: int) -> None:
        """Send a round's context record to `context_topic`, stamped with the round's time
        (the replay reads the rounds in that order). Raises when it cannot be handed over
        (no producer now, no metadata within max_block_ms; `ContextTooLarge` when larger
        than the producer's max_request_size): the collector counts and logs it. A delivery
        that fails later is counted in `counts.contexts_lost`, told to the listener by
        reason and logged."""
        from kafka.errors import MessageSizeTooLargeError

        if self.context_topic is None:
            raise RuntimeError("no context topic set")
        producer = self._current_producer()
        if producer is None:  # discarded after a failure, rebuilt after its backoff
            raise ConnectionError("no Kafka producer (being rebuilt after a failure)")
        try:
            future = producer.send(
                self.context_topic, key=key, value=value, timestamp_ms=timestamp_ms
            )
        except MessageSizeTooLargeError as exc:
            raise ContextTooLarge(_describe(exc)) from exc
        future.add_errback(self._lose_context)

    def _lose_context(self, exc: Exception) -> None:
        from kafka.errors import MessageSizeTooLargeError

        with self._lock:
            self.counts.contexts_lost += 1
        # The broker's limit (message.max.bytes, the topic's max.message.bytes) may be
        # below the producer's: it refuses the record with MESSAGE_SIZE_TOO_LARGE.
        too_large = isinstance(exc, MessageSizeTooLargeError)
        reason = (
            ContextPublishFailure.TOO_LARGE if too_large else ContextPublishFailure.NOT_DELIVERED
        )
        if self._listener is not None:
            self._listener.context_publish_failed(reason.value)
        log.warning(
            "collector: a context record was not delivered (%s): %s", reason.value, _describe(exc)
        )

    def dead_letter(
        self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> None:
        """Send a rejected topic entry to `dead_letter_topic` (none set: only counted)."""
        producer = self._current_producer()
        if self.dead_letter_topic is None or producer is None:
            self.counts.dead_letters_lost += 1
            return
        try:
            future = producer.send(
                self.dead_letter_topic, key=key, value=value, headers=list(headers)
            )
        except Exception as exc:
            self.counts.dead_letters_lost += 1
            log.warning("collector: a dead letter was not sent: %s", _describe(exc))
            return
        future.add_errback(lambda _exc: self._lose_dead_letter())

    def _lose_dead_letter(self) -> None:
        with self._lock:
            self.counts.dead_letters_lost += 1

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
