"""Bounded shutdown of kafka-python clients: every close and flush in the process has a limit.

kafka-python's `KafkaProducer.close()` without a timeout flushes first and waits for Kafka
for ever; with a timeout, its flush raises `KafkaTimeoutError` before the sender thread is
forced down, which leaves the thread (and its pending records) behind. `close_producer`
forces the sender down in that case, so a close returns within about `timeout_s` whether
or not Kafka answers; the records it could not deliver fail their futures.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafka import KafkaConsumer, KafkaProducer

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0  # every producer and consumer close in the process waits at most this


def close_producer(producer: KafkaProducer, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """Close a KafkaProducer within about `timeout_s`, dropping what Kafka has not taken."""
    from kafka.errors import KafkaTimeoutError

    try:
        producer.close(timeout=timeout_s)
        return
    except KafkaTimeoutError:
        log.warning("Kafka producer not flushed within %s s; closing without it", timeout_s)
    # close() gave up inside flush() and left the sender running: force it down (this
    # fails the undelivered batches), then close() again, which now has nothing to wait for.
    sender = getattr(producer, "_sender", None)
    if sender is not None:
        sender.force_close()
        sender.join(max(timeout_s, 1.0))  # it fails the pending futures on its way out
    try:
        producer.close(timeout=0)
    except KafkaTimeoutError:
        log.warning("Kafka producer still had undelivered records after a forced close")


def close_consumer(consumer: KafkaConsumer, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """Close a KafkaConsumer within about `timeout_s` (no group: nothing to commit)."""
    consumer.close(autocommit=False, timeout_ms=int(timeout_s * 1000))
