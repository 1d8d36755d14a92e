"""A read task's Kafka client: offsets [start, end) of one partition, read with librdkafka.

kafka-python decodes every record in Python (~10 µs a record on this machine), which bounds
a read task when each event is a message of its own. confluent-kafka's consumer (librdkafka,
in C) hands records over in batches for ~2 µs each
(docs/decisions.md#kafka-read-tasks-on-librdkafka). The driver's offset logic stays on
kafka-python (`streaming.read.source`): it reads a few high-water marks per trigger, not records.

- No consumer group is joined and nothing is committed: the partition is `assign`ed at the
  start offset. librdkafka refuses to build a consumer without a `group.id`; with `assign`
  and auto-commit off it never joins the group.
- `isolation.level` is read_uncommitted, as kafka-python reads: librdkafka's default,
  read_committed, stops at the last stable offset, which can be short of the end offsets
  the driver took from fetch high-water marks, and the task would wait for ever.
- Offsets may have gaps (transaction markers, compaction), so the range ends at the first
  record at or past `end`, or when librdkafka reports the partition's end
  (`enable.partition.eof`) at or past `end`: that end offset is past any trailing marker.
- The high-water mark for the task's summary is librdkafka's cached value, taken from its
  fetch responses, as kafka-python's `highwater()` is.
- A range the broker can no longer serve ends early, counted in `lost_offsets`: records the
  broker lost (its partition ends before the range), or a partition the topic no longer has
  (`vanished`: recreated with fewer partitions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from balancer.kafka.security import KafkaConfigError, redact_secrets

if TYPE_CHECKING:  # confluent-kafka is imported where a consumer is made (in the task)
    from confluent_kafka import Consumer, Message

log = logging.getLogger(__name__)

# Records asked of librdkafka per call: enough that the call's own cost (~10 µs) is spread
# thin, few enough that a batch's Message objects stay a few MiB.
CONSUME_MESSAGES = 10_000

# The same name as the kafka-python clients: brokers' logs and quotas see one application.
CLIENT_ID = "pulsar-balancer-stream"


def consumer_config(
    bootstrap_servers: str, security: Mapping[str, str]
) -> dict[str, str | int | bool]:
    """librdkafka properties of a read task's consumer (`security`: already mapped)."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "client.id": CLIENT_ID,
        "group.id": CLIENT_ID,  # required by librdkafka; never joined (see the module doc)
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted",
        **security,
    }


class PartitionRange:
    """Records of offsets [start, end) of one partition, in offset order, in batches.

    Use as a context manager; `batches()` yields lists of confluent-kafka `Message`s holding
    data records only, and then `high_watermark` holds the partition's fetch high-water mark.
    """

    def __init__(
        self,
        config: Mapping[str, str | int | bool],
        topic: str,
        partition: int,
        start: int,
        end: int,
        *,
        poll_timeout_s: float,
        read_timeout_s: float,
        max_messages: int = CONSUME_MESSAGES,
    ) -> None:
        self.config = dict(config)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.poll_timeout_s = poll_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_messages = max_messages
        self.high_watermark: int | None = None
        self.lost_offsets = 0  # offsets of the range the broker no longer had
        self.vanished = False  # the topic no longer has the partition: nothing can be read
        self._consumer: Consumer | None = None

    def __repr__(self) -> str:  # the config holds passwords: never shown
        return f"PartitionRange({self.topic}-{self.partition} [{self.start}, {self.end}))"

    def __enter__(self) -> PartitionRange:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        # librdkafka's config strings are plain str: a password must not leak through the
        # error of a refused property.
        try:
            consumer = Consumer(self.config)
        except (KafkaException, ValueError, TypeError) as exc:
            raise KafkaConfigError(
                f"cannot build the Kafka consumer: {redact_secrets(str(exc), self.config)}"
            ) from None
        consumer.assign([TopicPartition(self.topic, self.partition, self.start)])
        self._consumer = consumer
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._consumer is not None:
            # No group joined and nothing to commit: close only frees the client.
            self._consumer.close()
            self._consumer = None

    def batches(self) -> Iterator[list[Message]]:
        """The range's records, a consume() call's worth at a time (never an empty list)."""
        from confluent_kafka import KafkaError, TopicPartition

        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("PartitionRange.batches() outside its `with` block")
        end = self.end
        next_offset = self.start
        idle_since = time.monotonic()
        while next_offset < end:
            # consume() returns early only once it has as many messages as asked for: asking
            # for no more than the range still holds ends the task as soon as its last
            # records arrive, instead of after poll_timeout_s (ranges with markers, which
            # hold fewer records than offsets, still end within it).
            want = min(self.max_messages, end - next_offset)
            messages = consumer.consume(want, self.poll_timeout_s)
            records = [m for m in messages if m.error() is None]
            if len(records) != len(messages):
                for m in messages:
                    error = m.error()
                    if error is None:
                        continue
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The partition's end so far: past any marker before it.
                        next_offset = max(next_offset, _offset(m))
                    else:
                        self._on_error(error)
            if records:
                last = _offset(records[-1])
                if last >= end or _offset(records[0]) < self.start:
                    # Below the start: librdkafka reset an offset the broker no longer has to
                    # the earliest (see _partition_end); those records are not the range's.
                    records = [m for m in records if self.start <= _offset(m) < end]
                next_offset = max(next_offset, last + 1)
                idle_since = time.monotonic()
                if records:
                    yield records
                continue
            partition_end = self._partition_end(consumer)
            if self.vanished:
                # The topic was recreated with fewer partitions after the range was planned
                # (the driver plans the ranges of partitions it knows are gone as vanished,
                # `KafkaStatsStreamReader.partitions`): the range can never be read.
                log.warning(
                    "Kafka topic %s no longer has partition %d: offsets %d..%d of this "
                    "batch's range are skipped",
                    self.topic, self.partition, next_offset, end,
                )  # fmt: skip
                self.lost_offsets = end - next_offset
                break
            if partition_end is not None and next_offset >= partition_end < end:
                # The range was planned on records the broker no longer has: it came back
                # empty (or truncated its log) and Spark replays a batch planned before. The
                # high-water mark never falls otherwise, so the rest will never come:
                # waiting would time out, and the restarted job would replay the same range
                # and time out again. The driver re-reads the partition from offset 0 in the
                # next batch (KafkaStatsStreamReader.latestOffset).
                log.warning(
                    "Kafka %s-%d ends at offset %d, before this batch's range %d..%d: the "
                    "broker lost those records; offsets %d..%d are skipped",
                    self.topic, self.partition, partition_end, self.start, end,
                    next_offset, end,
                )  # fmt: skip
                self.lost_offsets = end - next_offset
                break
            if next_offset < end and time.monotonic() - idle_since > self.read_timeout_s:
                raise TimeoutError(
                    f"{self.topic}-{self.partition}: no record for {self.read_timeout_s} s "
                    f"while reading offsets {next_offset}..{end}"
                )
        _, high = consumer.get_watermark_offsets(
            TopicPartition(self.topic, self.partition), cached=True
        )
        self.high_watermark = high if high >= 0 else None  # negative: no fetch answered

    def _partition_end(self, consumer: Consumer) -> int | None:
        """The partition's high-water mark as the broker answers now (None: no answer).

        Sets `vanished` when the topic no longer has the partition.
        """
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        try:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(self.topic, self.partition),
                timeout=self.poll_timeout_s,
                cached=False,
            )
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._UNKNOWN_PARTITION:
                self.vanished = self._partition_gone(consumer)
            return None  # else the broker is away: the read timeout bounds the wait
        return int(high) if high >= 0 else None

    def _partition_gone(self, consumer: Consumer) -> bool:
        """True when fresh metadata lists the topic without this partition."""
        from confluent_kafka import KafkaException

        try:
            topic = consumer.list_topics(self.topic, timeout=self.poll_timeout_s).topics.get(
                self.topic
            )
        except KafkaException:
            return False
        # A topic without partitions, or with an error, is not (yet) an answer.
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        return self.partition not in topic.partitions

    def _on_error(self, error: object) -> None:
        from confluent_kafka import KafkaError, KafkaException

        assert isinstance(error, KafkaError)
        where = f"{self.topic}-{self.partition}"
        if error.retriable() and not error.fatal():
            # librdkafka retries these itself; read_timeout_s bounds how long we wait.
            log.warning("Kafka %s: %s (retrying)", where, error.str())
            return
        raise KafkaException(KafkaError(error.code(), f"{where}: {error.str()}"))


def _offset(message: Message) -> int:
    offset = message.offset()
    if offset is None:  # only a message without a position (none that we keep)
        raise AssertionError("a consumed Kafka record has no offset")
    return offset
