"""Creating the stats and dead-letter topics on a real broker (tansu), once and only once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka.admin import KafkaAdminClient

from balancer.kafka.embedded import EmbeddedKafka
from balancer.kafka.topics import ensure_topics

pytestmark = pytest.mark.kafka


@pytest.fixture
def broker() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka.start() as running:
        yield running


def test_creates_the_missing_topics_and_only_those(broker: EmbeddedKafka) -> None:
    servers = broker.bootstrap_servers
    assert ensure_topics(servers, {"stats": 3}) == ["stats"]
    # Again, with a new one: the existing topic is left alone, the new one created.
    created = ensure_topics(
        servers,
        {"stats": 3, "stats-dead-letters": 1},
        client_kwargs={"client_id": "caller-chosen"},  # the caller's settings win
    )
    assert created == ["stats-dead-letters"]
    assert ensure_topics(servers, {"stats": 3, "stats-dead-letters": 1}) == []
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        assert {"stats", "stats-dead-letters"} <= set(admin.list_topics())
        partitions = {
            t["name"]: len(t["partitions"])
            for t in admin.describe_topics(["stats", "stats-dead-letters"])
        }
    finally:
        admin.close()
    assert partitions == {"stats": 3, "stats-dead-letters": 1}
