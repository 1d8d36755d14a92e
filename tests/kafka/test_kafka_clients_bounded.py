"""Every close and flush is bounded when Kafka is gone: a real tansu broker, stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from balancer.kafka.clients import close_producer
from balancer.kafka.embedded import EmbeddedKafka
from streaming.driver.deadletters import DeadLetter, KafkaDeadLetters

pytestmark = pytest.mark.kafka


@pytest.fixture
def broker() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka.start() as running:
        yield running


def test_close_producer_returns_with_kafka_gone_and_fails_what_was_pending(
    broker: EmbeddedKafka,
) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=60_000)
    first = producer.send("bounded", value=b"first")
    producer.flush(timeout=30)  # sent now despite the linger: metadata known, broker up
    assert first.succeeded()
    broker.stop()
    pending = producer.send("bounded", value=b"never delivered")  # lingers: not sent yet
    close_producer(producer, timeout_s=1.0)  # kafka-python's own close() would wait for Kafka
    assert pending.is_done and pending.failed()
    assert not producer._sender.is_alive()  # no thread left behind to retry for minutes


def test_dead_letters_with_kafka_gone_fail_the_batch_instead_of_hanging_or_losing_them(
    broker: EmbeddedKafka,
) -> None:
    sink = KafkaDeadLetters.connect(
        bootstrap_servers=broker.bootstrap_servers,
        topic="bounded-dlq",
        source_topic="stats",
        client_kwargs={},
    )
    sink.flush_timeout_s = 2.0
    letter = DeadLetter(raw=b"{", reason="bad_json", detail="x", partition=0, offset=7)
    sink.write(1, [letter])  # Kafka up: stored
    broker.stop()
    # The batch must not commit without its dead letters: write raises (the batch fails
    # and is replayed after the restart) rather than returning as if they were stored.
    with pytest.raises(KafkaError):
        sink.write(2, [letter])
    sink.close()
    assert not sink.producer._sender.is_alive()
