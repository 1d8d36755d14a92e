"""Make sure the stats and dead-letter topics exist before anything produces or reads.

A real deployment usually provisions its topics; creating a missing one is harmless there
and necessary for the embedded broker, which starts empty.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)


def ensure_topics(
    bootstrap_servers: str,
    partitions_by_topic: Mapping[str, int],
    *,
    client_kwargs: Mapping[str, Any] | None = None,
    replication_factor: int = 1,
) -> list[str]:
    """Create the topics that do not exist yet; returns the names it created."""
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers.split(","),
        client_id="pulsar-balancer-setup",
        **dict(client_kwargs or {}),
    )
    try:
        existing = set(admin.list_topics())
        missing = [
            NewTopic(name, partitions, replication_factor)
            for name, partitions in partitions_by_topic.items()
            if name not in existing
        ]
        created: list[str] = []
        for topic in missing:
            try:
                admin.create_topics([topic])
                created.append(topic.name)
            except TopicAlreadyExistsError:
                pass  # another process won the race: fine
        if created:
            log.info("created Kafka topics %s", created)
        return created
    finally:
        admin.close()
