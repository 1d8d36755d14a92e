"""Make sure the stats and dead-letter topics exist before anything produces or reads.

The one way topics are created: by the app at start and by the stream's dead-letter sink.
A real deployment usually provisions its topics; creating a missing one is harmless there
and necessary for the embedded broker (and any broker that does not auto-create), which
starts empty.
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
    """Create the topics that do not exist yet; returns the names it created.

    Each topic is created on its own, so a topic another process creates meanwhile
    (`TopicAlreadyExistsError`) neither fails the call nor stops the others. Any other
    error (Kafka unreachable, not authorised) is raised.
    """
    settings: dict[str, Any] = {"client_id": "pulsar-balancer-setup", **(client_kwargs or {})}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers.split(","), **settings)
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
