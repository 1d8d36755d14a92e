"""Drain marks kept on a compacted Kafka topic: one record per `cluster/broker`, the latest
is the mark (`balancer.core.drain_marks`). Why Kafka: docs/decisions.md ("Drain marks").

- Any process that reaches Kafka writes a mark: `pulsar-balancer drain` from an operator's
  shell or a broker pod's preStop hook; nothing is sent to a running balancer, so it needs
  no restart and no port of the balancer open to the broker pods.
- Every balancer of the peer group reads the same topic, so a standby that takes the lease
  over sees the marks the holder saw, and a restarted balancer reads them again from the
  start (the topic is compacted: its size is about one record per broker ever marked).
- Reading is incremental: `refresh()` fetches only the records written since the last one,
  at most `max_records` per call; a first read of a big topic catches up over a few calls.
- A record that is no mark is counted (`bad_records`), logged once with its offset and
  reason, and skipped; it never stops the read.

- The same topic holds one rollout record per cluster (`<cluster>/@rollout`,
  `balancer.core.rollout_record`, written by `pulsar-balancer roll`): `rollout(cluster)`.

One instance is safe to use from several threads (one lock around the consumer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from balancer.core.drain_marks import BadMarkError, DrainMark, decode_mark, draining_brokers
from balancer.core.rollout_record import Rollout, decode_rollout, is_rollout_key
from balancer.kafka.clients import close_consumer, close_producer

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "pulsar-balancer-drain-marks"
# Compacted: only each key's latest record need stay; kept for ever (never deleted by age,
# or an old mark would vanish). A real broker compacts; tansu keeps every record (harmless).
TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1"}
_PARTITION = 0  # one partition: every mark in one order


class DrainMarksUnavailableError(RuntimeError):
    """Kafka did not answer the read or write of the marks in time."""


def ensure_marks_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    client_kwargs: Mapping[str, Any] | None = None,
    replication_factor: int = 1,
    timeout_s: float = 10.0,
) -> bool:
    """Create the compacted one-partition marks topic unless it exists; True if created.
    Kafka unreachable: raises within about `timeout_s` (kafka-python waits 30 s by default)."""
    settings: dict[str, Any] = {
        "client_id": "pulsar-balancer-drain-marks",
        "bootstrap_timeout_ms": int(timeout_s * 1000),
        "request_timeout_ms": int(timeout_s * 1000),
        **(client_kwargs or {}),
    }
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers.split(","), **settings)
    try:
        if topic in set(admin.list_topics()):
            return False
        try:
            admin.create_topics(
                [NewTopic(topic, 1, replication_factor, topic_configs=dict(TOPIC_CONFIGS))]
            )
        except TopicAlreadyExistsError:
            return False
        log.info("created the drain marks topic %s (compacted)", topic)
        return True
    finally:
        admin.close()


class KafkaDrainMarks:
    """The marks of a peer group, read from and written to `topic`."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        client_kwargs: Mapping[str, Any] | None = None,
        max_records: int = 100_000,
        timeout_s: float = 10.0,
        create_topic: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._client_kwargs = dict(client_kwargs or {})
        self._max_records = max_records
        self._timeout_s = timeout_s
        self._create_topic = create_topic
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._consumer: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._marks: dict[str, DrainMark] = {}
        self._rollouts: dict[str, Rollout] = {}  # cluster -> its rollout record (`roll`)
        self._position = 0  # next offset to read
        self._topic_checked = False
        self.bad_records = 0  # records skipped since this instance started
        self.records_read = 0

    # -- reading ---------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read what was written since the last call (at most `max_records`); True once
        caught up with the topic's end. Raises DrainMarksUnavailableError when Kafka does
        not answer within `timeout_s` (the marks already read stay)."""
        with self._lock:
            return self._refresh()

    def marks(self, cluster: str | None = None) -> tuple[DrainMark, ...]:
        """Every mark read so far (of `cluster`), cleared ones included, by key."""
        with self._lock:
            return tuple(m for _, m in sorted(self._marks.items()) if cluster in (None, m.cluster))

    def draining(self, cluster: str) -> frozenset[str]:
        """Brokers of `cluster` marked draining, as of the last `refresh()`."""
        with self._lock:
            return draining_brokers(self._marks.values(), cluster)

    def rollout(self, cluster: str) -> Rollout | None:
        """The cluster's rollout record as of the last `refresh()` (None: never rolled)."""
        with self._lock:
            return self._rollouts.get(cluster)

    def _refresh(self) -> bool:
        consumer = self._reader()
        tp = TopicPartition(self.topic, _PARTITION)
        deadline = self._monotonic() + self._timeout_s
        end = self._end_offset(consumer, tp, deadline)
        read = 0
        while self._position < end and read < self._max_records:
            if self._monotonic() > deadline:
                raise DrainMarksUnavailableError(
                    f"drain marks: topic {self.topic} not read to its end in {self._timeout_s} s"
                )
            batch = consumer.poll(timeout_ms=200, max_records=self._max_records - read)
            for record in batch.get(tp, ()):
                self._apply(record.offset, record.key, record.value)
                self._position = record.offset + 1
                read += 1
        self.records_read += read
        return self._position >= end

    def _end_offset(self, consumer: KafkaConsumer, tp: TopicPartition, deadline: float) -> int:
        """The partition's high-water mark as a fetch response reports it (tansu answers no
        ListOffsets "latest"): a fresh assignment forgets the last one, then poll from our
        position until a fetch answers."""
        consumer.assign([])
        consumer.assign([tp])
        consumer.seek(tp, self._position)
        while True:
            mark = consumer.highwater(tp)
            if mark is not None:
                return int(mark)
            if self._monotonic() > deadline:
                raise DrainMarksUnavailableError(
                    f"drain marks: no answer from topic {self.topic} in {self._timeout_s} s"
                )
            batch = consumer.poll(timeout_ms=200, max_records=self._max_records)
            # Records that came with the answer are applied now (none is read twice).
            for record in batch.get(tp, ()):
                self._apply(record.offset, record.key, record.value)
                self._position = record.offset + 1
                self.records_read += 1

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if offset < self._position:
            return  # already applied (a re-fetch after a seek)
        try:
            if is_rollout_key(key):
                rollout = decode_rollout(key, value)
                self._rollouts[rollout.cluster] = rollout
                return
            mark = decode_mark(key, value)
        except BadMarkError as exc:
            self.bad_records += 1
            log.warning(
                "drain marks: record at offset %d of %s skipped: %s", offset, self.topic, exc
            )
            return
        self._marks[mark.key] = mark

    def _reader(self) -> KafkaConsumer:
        if self._consumer is None:
            self._ensure_topic()
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap_servers.split(","),
                group_id=None,  # no group: every reader reads every mark
                client_id="pulsar-balancer-drain-marks",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,  # an empty fetch (nothing new) answers this fast
                **self._client_kwargs,
            )
            consumer.assign([TopicPartition(self.topic, _PARTITION)])
            self._consumer = consumer
        return self._consumer

    def _ensure_topic(self) -> None:
        if self._create_topic and not self._topic_checked:
            ensure_marks_topic(
                self.bootstrap_servers,
                self.topic,
                client_kwargs=self._client_kwargs,
                timeout_s=self._timeout_s,
            )
            self._topic_checked = True

    # -- writing -----------------------------------------------------------------------------

    def write_rollout(self, rollout: Rollout) -> None:
        """Write the cluster's rollout record (as `write`: acks=all, or raises)."""
        with self._lock:
            self._send([rollout.encode()])
            self._rollouts[rollout.cluster] = rollout

    def _send(self, records: list[tuple[bytes, bytes]]) -> None:
        producer = self._writer()
        futures = [
            producer.send(self.topic, key=key, value=value, partition=0) for key, value in records
        ]
        try:
            producer.flush(timeout=self._timeout_s)
            for future in futures:
                future.get(timeout=self._timeout_s)
        except Exception as exc:
            raise DrainMarksUnavailableError(
                f"drain marks: Kafka did not take the records ({type(exc).__name__}: {exc})"
            ) from exc

    def write(self, marks: tuple[DrainMark, ...] | list[DrainMark]) -> None:
        """Write each mark as its key's latest state; returns once Kafka has them all
        (acks=all), else raises DrainMarksUnavailableError. Applied locally at once."""
        if not marks:
            return
        with self._lock:
            self._send([mark.encode() for mark in marks])
            for mark in marks:
                self._marks[mark.key] = mark

    def _writer(self) -> KafkaProducer:
        if self._producer is None:
            self._ensure_topic()
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap_servers.split(","),
                client_id="pulsar-balancer-drain-marks",
                acks="all",
                retries=3,
                max_block_ms=int(self._timeout_s * 1000),
                **self._client_kwargs,
            )
        return self._producer

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                close_consumer(self._consumer)
                self._consumer = None
            if self._producer is not None:
                close_producer(self._producer)
                self._producer = None

    def __enter__(self) -> KafkaDrainMarks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
