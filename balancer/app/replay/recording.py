"""Where a recording is read from: the Kafka topics themselves (`KafkaRecording`), or a
directory written by `pulsar-balancer record` (`DirRecording`). Both give the `Recording`
protocol of `balancer.core.replay.recording`, and both stream: nothing holds more than a
fetch (Kafka) or a Parquet record batch (a directory) per partition or file.

Order (the same from both, so a replay of a directory equals a replay of its Kafka range):
- stats messages: every partition in offset order, merged across partitions by
  (record timestamp, partition, offset);
- contexts: the context topic's records merged the same way. The collector stamps each
  with its round's time (`round_ms`), so this is round order; a record older than one
  already given, or a cluster's round given twice, is skipped and counted
  (`out_of_order`, `duplicate`), as is a record that does not parse (its reason from
  `balancer.core.context_record`). `context_counts` says what was read and skipped.

The time range is on record timestamps, `since_ms` <= t < `until_ms`: each partition's read
starts at `offsets_for_times(since_ms)` (the first offset stamped at or after it) and ends
at the partition's end as read once at the start (its high-water mark), or earlier, at the
first record stamped `UNTIL_SLACK_MS` past `until_ms`: the collector's records are stamped
when sent (contexts: with their round's time), so a partition's stamps rise with its
offsets, a standby's collector stamping within the same seconds, and nothing in range
follows that far behind. Records outside the range are left out.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from balancer.app.replay.recording_dir import (
    CONTEXT_DIR,
    STATS_DIR,
    Manifest,
    read_manifest,
    read_messages,
)
from balancer.core.context_record import ContextRecordError, ContextRejectReason, decode_context
from balancer.core.replay.recording import RecordedMessage, Recording, RoundContext

if TYPE_CHECKING:
    from kafka import KafkaConsumer

    from balancer.app.config import BalancerConfig

log = logging.getLogger(__name__)

# A partition's read ends at its first record stamped this long past `until_ms` (see above).
UNTIL_SLACK_MS = 300_000
# No record of a partition for this long while its end is not reached: the read fails.
READ_TIMEOUT_S = 30.0
# A cluster's round given twice: a standby balancer's collector publishes it too (writer
# lease), or a producer retried without idempotence.
DUPLICATE = "duplicate"


def _order_key(message: RecordedMessage) -> tuple[int, int, int]:
    return (message.timestamp_ms, message.partition, message.offset)


@dataclass
class ContextCounts:
    """What `contexts()` read: records given, and records skipped by reason."""

    given: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    clusters: set[str] = field(default_factory=set)

    @property
    def skipped(self) -> int:
        return sum(self.rejected.values())

    def describe(self) -> str:
        """One line for the replay's and record's output."""
        if not self.given and not self.skipped:
            return (
                "no context records: the collector publishes them only when it reads load "
                "reports (moves.enabled and moves.read_load_reports); without them the "
                "replay has no bundle layout, owners or broker load reports"
            )
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.rejected.items()))
        return f"{self.given} context records read" + (
            f", {self.skipped} skipped ({skipped})" if skipped else ""
        )


class ContextParser:
    """Reads context records one at a time: the round of each, or None for one skipped
    (counted in `counts` by reason)."""

    def __init__(self, counts: ContextCounts) -> None:
        self.counts = counts
        self._newest_ms: int | None = None
        self._seen: dict[str, int] = {}  # cluster -> its newest round given

    def take(self, message: RecordedMessage) -> RoundContext | None:
        counts = self.counts
        try:
            context = decode_context(message.value)
        except ContextRecordError as exc:
            _skip(counts, exc.reason.value, message, exc.detail)
            return None
        if self._seen.get(context.cluster) == context.round_ms:
            _skip(counts, DUPLICATE, message, f"round {context.round_ms} of {context.cluster}")
            return None
        if self._newest_ms is not None and context.round_ms < self._newest_ms:
            detail = f"round {context.round_ms} after round {self._newest_ms}"
            _skip(counts, ContextRejectReason.OUT_OF_ORDER.value, message, detail)
            return None
        self._newest_ms = context.round_ms
        self._seen[context.cluster] = context.round_ms
        counts.given += 1
        counts.clusters.add(context.cluster)
        return context


def parse_contexts(raw: Iterable[RecordedMessage], counts: ContextCounts) -> Iterator[RoundContext]:
    """The rounds of the context topic's records, in round order; bad ones counted, skipped."""
    parser = ContextParser(counts)
    for message in raw:
        context = parser.take(message)
        if context is not None:
            yield context


def _skip(counts: ContextCounts, reason: str, message: RecordedMessage, detail: str) -> None:
    if not counts.rejected[reason]:  # once per reason: a broken producer sends many
        log.warning(
            "context record %d@%d skipped (%s: %s); counted, logged once per reason",
            message.offset,
            message.partition,
            reason,
            detail,
        )
    counts.rejected[reason] += 1


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """The offsets of one partition a recording reads, [start, end), as found at the start."""

    partition: int
    start: int
    end: int


class KafkaRecording:
    """The stats and context topics between `since_ms` and `until_ms` (None: unbounded)."""

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        stats_topic: str,
        context_topic: str,
        since_ms: int | None = None,
        until_ms: int | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        if since_ms is not None and until_ms is not None and until_ms <= since_ms:
            raise ValueError(f"until ({until_ms} ms) must be after since ({since_ms} ms)")
        servers = bootstrap_servers
        self._servers = servers.split(",") if isinstance(servers, str) else list(servers)
        self.stats_topic = stats_topic
        self.context_topic = context_topic
        self.since_ms = since_ms
        self.until_ms = until_ms
        self._client_kwargs = dict(client_kwargs or {})
        self._read_timeout_s = read_timeout_s
        self._ranges: dict[str, tuple[PartitionRange, ...]] = {}
        self.context_counts = ContextCounts()

    @property
    def description(self) -> str:
        return f"kafka:{self.stats_topic}"

    def stats_messages(self) -> Iterator[RecordedMessage]:
        return self.messages(self.stats_topic)

    def raw_contexts(self) -> Iterator[RecordedMessage]:
        """The context topic's records in range, as Kafka holds them (bad ones too)."""
        return self.messages(self.context_topic)

    def contexts(self) -> Iterator[RoundContext]:
        self.context_counts = ContextCounts()
        return parse_contexts(self.raw_contexts(), self.context_counts)

    def ranges(self, topic: str) -> tuple[PartitionRange, ...]:
        """The offsets read of each partition of `topic`, found once (on first use)."""
        if topic not in self._ranges:
            self._ranges[topic] = self._find_ranges(topic)
        return self._ranges[topic]

    def messages(self, topic: str) -> Iterator[RecordedMessage]:
        """`topic`'s records in range, merged across partitions (see the module's doc)."""
        readers = [self._read_partition(topic, r) for r in self.ranges(topic) if r.end > r.start]
        return heapq.merge(*readers, key=_order_key)

    # -- Kafka ----------------------------------------------------------------------------
    def _consumer(self) -> KafkaConsumer:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self._servers,
            client_id="pulsar-balancer-recording",
            group_id=None,
            enable_auto_commit=False,
            # Offsets trimmed by retention since the range was found: read what is left.
            auto_offset_reset="earliest",
            **self._client_kwargs,
        )

    def _find_ranges(self, topic: str) -> tuple[PartitionRange, ...]:
        from kafka import TopicPartition

        from balancer.kafka.clients import close_consumer
        from streaming.read.kafka_offsets import fetch_high_watermarks, topic_partitions

        consumer = self._consumer()
        try:
            parts = sorted(topic_partitions(consumer, topic, refresh=True))
            if not parts and topic == self.context_topic:
                # Never created: no balancer ran with load reports read (moves off).
                log.warning("Kafka topic %s does not exist: no context records", topic)
                return ()
            if not parts:
                raise LookupError(f"Kafka topic {topic} does not exist")
            tps = [TopicPartition(topic, p) for p in parts]
            first = consumer.beginning_offsets(tps)
            starts = {tp.partition: int(first[tp]) for tp in tps}
            # The high-water marks as fetches report them (the broker's ListOffsets answer
            # for the end is not trusted: tansu, the embedded broker, answers it wrong).
            ends = fetch_high_watermarks(consumer, topic, starts, timeout_s=self._read_timeout_s)
            if self.since_ms is not None:
                found = consumer.offsets_for_times({tp: self.since_ms for tp in tps})
                for tp in tps:
                    hit = found.get(tp)
                    # None: nothing stamped at or after since_ms.
                    at = ends[tp.partition] if hit is None else int(hit.offset)
                    starts[tp.partition] = max(starts[tp.partition], at)
        finally:
            close_consumer(consumer)
        return tuple(PartitionRange(p, min(starts[p], ends[p]), ends[p]) for p in parts)

    def _read_partition(self, topic: str, span: PartitionRange) -> Iterator[RecordedMessage]:
        from kafka import TopicPartition

        from balancer.kafka.clients import close_consumer

        since_ms = self.since_ms
        until_ms = self.until_ms
        stop_ms = None if until_ms is None else until_ms + UNTIL_SLACK_MS
        tp = TopicPartition(topic, span.partition)
        consumer = self._consumer()
        try:
            consumer.assign([tp])
            consumer.seek(tp, span.start)
            waited_since = time.monotonic()
            while consumer.position(tp) < span.end:
                records = consumer.poll(timeout_ms=500, max_records=1000).get(tp, [])
                if not records:
                    if time.monotonic() - waited_since > self._read_timeout_s:
                        raise TimeoutError(
                            f"Kafka topic {topic} partition {span.partition}: no record at "
                            f"offset {consumer.position(tp)} in {self._read_timeout_s:.0f} s "
                            f"(the range ends at {span.end})"
                        )
                    continue
                waited_since = time.monotonic()
                for record in records:
                    if record.offset >= span.end:
                        return
                    stamp = int(record.timestamp)
                    if stop_ms is not None and stamp >= stop_ms:
                        return
                    if (since_ms is not None and stamp < since_ms) or (
                        until_ms is not None and stamp >= until_ms
                    ):
                        continue
                    yield RecordedMessage(
                        partition=span.partition,
                        offset=int(record.offset),
                        timestamp_ms=stamp,
                        key=record.key,
                        value=record.value if record.value is not None else b"",
                    )
        finally:
            close_consumer(consumer)


def kafka_recording(
    config: BalancerConfig, *, since_ms: int | None = None, until_ms: int | None = None
) -> KafkaRecording:
    """The recording the config's Kafka holds (`kafka.stats_topic`, `kafka.context_topic`)."""
    from balancer.app.stream_settings import kafka_security

    return KafkaRecording(
        bootstrap_servers=config.kafka.bootstrap_servers,
        stats_topic=config.kafka.stats_topic,
        context_topic=config.kafka.context_topic,
        since_ms=since_ms,
        until_ms=until_ms,
        client_kwargs=kafka_security(config).client_kwargs(),
    )


class DirRecording:
    """A directory written by `pulsar-balancer record` (`recording_dir` says its format)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest: Manifest = read_manifest(self.path)  # raises ValueError if not one
        self.context_counts = ContextCounts()

    @property
    def description(self) -> str:
        return str(self.path)

    @property
    def since_ms(self) -> int | None:
        return self.manifest["since_ms"]

    @property
    def until_ms(self) -> int | None:
        return self.manifest["until_ms"]

    def stats_messages(self) -> Iterator[RecordedMessage]:
        return read_messages(self.path / STATS_DIR, self.manifest["stats"]["files"])

    def raw_contexts(self) -> Iterator[RecordedMessage]:
        return read_messages(self.path / CONTEXT_DIR, self.manifest["context"]["files"])

    def contexts(self) -> Iterator[RoundContext]:
        self.context_counts = ContextCounts()
        return parse_contexts(self.raw_contexts(), self.context_counts)


def _conforms(kafka: KafkaRecording, directory: DirRecording) -> tuple[Recording, Recording]:
    """Both readers are `Recording`s (checked by mypy, never called)."""
    return kafka, directory
