"""Dead-letter sinks: where rejected events go, with the original bytes, reason and offset.

Both sinks are written from the driver once per micro-batch, before the batch commits:
- `KafkaDeadLetters` (the default): one record per reject; value = the original bytes, key =
  `<source topic>/<partition>/<offset>`, headers = reason, detail, source coordinates and
  the batch id. A batch replayed after a crash writes its dead letters again: consumers
  de-duplicate by key (at-least-once).
- `DirectoryDeadLetters`: one JSON-lines file per batch (`batch-<id>.jsonl`), written to a
  temporary name and renamed, so a replay replaces the file (exactly-once).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from balancer.kafka.clients import close_producer

if TYPE_CHECKING:
    from kafka import KafkaProducer


@dataclass(frozen=True, slots=True)
class DeadLetter:
    raw: bytes
    reason: str
    detail: str
    partition: int
    offset: int

    @classmethod
    def from_json(cls, text: str) -> DeadLetter:
        """From the stream's `to_json(struct(...))` form (raw base64-encoded by Spark)."""
        obj: dict[str, Any] = json.loads(text)
        return cls(
            raw=base64.b64decode(obj.get("raw") or ""),
            reason=str(obj["reason"]),
            detail=str(obj.get("detail") or ""),
            partition=int(obj["kafka_partition"]),
            offset=int(obj["kafka_offset"]),
        )


class DeadLetterSink(Protocol):
    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None: ...

    def close(self) -> None: ...


class KafkaDeadLetters:
    def __init__(
        self,
        producer: KafkaProducer,
        *,
        topic: str,
        source_topic: str,
        flush_timeout_s: float = 30.0,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.source_topic = source_topic
        self.flush_timeout_s = flush_timeout_s

    @classmethod
    def connect(
        cls, *, bootstrap_servers: str, topic: str, source_topic: str, client_kwargs: dict[str, Any]
    ) -> KafkaDeadLetters:
        from kafka import KafkaProducer

        from balancer.kafka.topics import ensure_topics

        producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers.split(","),
            client_id="pulsar-balancer-dead-letters",
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            max_request_size=2 * 1024 * 1024,
            **client_kwargs,
        )
        # Not every broker auto-creates topics; the app creates this one too, but the stream
        # can run on its own (`python -m streaming.spark.standalone`).
        ensure_topics(bootstrap_servers, {topic: 1}, client_kwargs=client_kwargs)
        return cls(producer, topic=topic, source_topic=source_topic)

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        futures = []
        for letter in letters:
            headers = [
                ("reason", letter.reason.encode()),
                ("detail", letter.detail.encode()),
                ("source_topic", self.source_topic.encode()),
                ("source_partition", str(letter.partition).encode()),
                ("source_offset", str(letter.offset).encode()),
                ("batch_id", str(batch_id).encode()),
            ]
            key = f"{self.source_topic}/{letter.partition}/{letter.offset}".encode()
            futures.append(
                self.producer.send(self.topic, key=key, value=letter.raw, headers=headers)
            )
        # The batch must not commit before its dead letters are stored: a flush that times
        # out or a letter Kafka refused fails the batch (replayed after a restart).
        self.producer.flush(timeout=self.flush_timeout_s)
        for future in futures:
            future.get(timeout=0)  # raises the send's error

    def close(self) -> None:
        close_producer(self.producer)


class DirectoryDeadLetters:
    def __init__(self, directory: Path, *, source_topic: str) -> None:
        self.directory = directory
        self.source_topic = source_topic
        directory.mkdir(parents=True, exist_ok=True)

    def path_for(self, batch_id: int) -> Path:
        return self.directory / f"batch-{batch_id:012d}.jsonl"

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        final = self.path_for(batch_id)
        temp = final.with_suffix(".tmp")
        with temp.open("w", encoding="utf-8") as out:
            for letter in letters:
                record = {
                    "reason": letter.reason,
                    "detail": letter.detail,
                    "source_topic": self.source_topic,
                    "source_partition": letter.partition,
                    "source_offset": letter.offset,
                    "batch_id": batch_id,
                    "raw_base64": base64.b64encode(letter.raw).decode("ascii"),
                }
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, final)

    def close(self) -> None:
        """Nothing held open."""


def read_directory(directory: Path) -> list[dict[str, Any]]:
    """Every dead letter in a `DirectoryDeadLetters` directory (raw decoded to bytes)."""
    out = []
    for path in sorted(directory.glob("batch-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            obj["raw"] = base64.b64decode(obj.pop("raw_base64"))
            out.append(obj)
    return out
