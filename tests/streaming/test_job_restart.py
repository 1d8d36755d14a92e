"""SIGKILL the job mid-stream, restart it from its checkpoint: every event counts exactly once.

The job runs as a subprocess (`python -m streaming.spark.standalone`, its own JVM, RocksDB state
store) writing each batch report as a JSON line. Small micro-batches (max offsets per trigger) make
the kill land while batches are still being processed. After the restart (Trigger.AvailableNow) the
reports of the distinct batch ids must add up to exactly the events produced, and every
closed window's per-topic values must equal the plain-Python computation: an event read
twice or lost would change a count or an average. (tests/job_process.py; the same test on a
standalone cluster is in test_job_cluster.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.job_process import (
    check_counted_exactly_once,
    kill_mid_stream_then_restart,
    restart_events,
)
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_sigkill_then_restart_counts_every_event_exactly_once(
    kafka: Broker, tmp_path: Path
) -> None:
    events = restart_events()
    reports = kill_mid_stream_then_restart(kafka, tmp_path, events, master="local[2]")
    check_counted_exactly_once(events, reports)
