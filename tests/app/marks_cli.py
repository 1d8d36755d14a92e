"""Shared by the tests of the `drain` and `roll` commands: a config on the tests' Kafka broker
and a simulated cluster `a`, and the drain-marks store as the commands see it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from balancer.kafka.drain_marks import KafkaDrainMarks
from tests.kafka_broker import Broker


def write_marks_config(tmp_path: Path, admin_url: str, kafka: Broker, topic: str) -> Path:
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "drain_marks_topic": topic},
        "clusters": [{"name": "a", "admin_url": admin_url}],
        "controller": {
            "journal_path": str(tmp_path / "journal.sqlite3"),
            "audit_log_path": str(tmp_path / "audit.jsonl"),
        },
    }
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def read_store(kafka: Broker, topic: str) -> KafkaDrainMarks:
    """The marks topic read once (the caller closes the store)."""
    store = KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic)
    store.refresh()
    return store
