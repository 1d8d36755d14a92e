"""The collector's round marker closes its round's window at once (issue 36): real Spark and
a real Kafka-protocol broker. Without it a window waits for the watermark's lateness (the
events of a round a `watermark_s` later); with it the watermark jumps to the marker's time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from balancer.core.report import StaticLayouts
from balancer.core.round_marker import encode_round_marker
from streaming.driver.jsonl_reports import JsonlReportHandler, read_reports
from streaming.spark.job import StreamSettings, run_available
from tests.kafka_broker import Broker
from tests.stream_events import encode, event, local_settings

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

MINUTE_MS = 60_000
TOPICS = ("t/ns/a", "t/ns/b")


def rounds(base_ms: int, first: int, last: int) -> list[bytes]:
    """One event per topic per round, each 5 s into its minute (a round on the grid)."""
    return [
        encode(event(t, base_ms + m * MINUTE_MS + 5_000))
        for m in range(first, last + 1)
        for t in TOPICS
    ]


def run(spark: Any, settings: StreamSettings, work: Path) -> dict[int, dict[str, Any]]:
    reports = work / "reports.jsonl"
    reports.unlink(missing_ok=True)
    run_available(spark, settings, JsonlReportHandler(reports), StaticLayouts(), timeout_s=300)
    return read_reports(reports)


def settings_for(kafka: Broker, work: Path) -> StreamSettings:
    topic = kafka.new_topic(partitions=2, prefix="marks")
    return local_settings(
        kafka.bootstrap_servers, topic, work, window_s=60, slide_s=60, watermark_s=60
    )


def newest_window_end(reports: dict[int, dict[str, Any]]) -> int:
    return max(r["window_end_ms"] for r in reports.values())


def test_a_round_marker_closes_its_rounds_window_and_a_later_straggler_is_late(
    kafka: Broker, spark: Any, tmp_path: Path
) -> None:
    base_ms = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    without = settings_for(kafka, plain)
    kafka.produce(without.topic, rounds(base_ms, -10, -8))
    # The watermark, 60 s behind the newest event, closes only the first round's window.
    assert newest_window_end(run(spark, without, plain)) == base_ms - 9 * MINUTE_MS

    settings = settings_for(kafka, marked)
    kafka.produce(
        settings.topic, [*rounds(base_ms, -10, -8), encode_round_marker(base_ms - 7 * MINUTE_MS)]
    )
    first = run(spark, settings, marked)
    # The marker promised nothing before minute -7: every window up to it closed.
    assert newest_window_end(first) == base_ms - 7 * MINUTE_MS
    assert sum(r["events_consumed"] for r in first.values()) == 6  # the marker is no event
    assert sum(r["events_late"] for r in first.values()) == 0
    assert not any(r["events_rejected"] for r in first.values())

    # A round -8 event after its marker is late (the collector never sends one); the next
    # round is on time.
    kafka.produce(settings.topic, [*rounds(base_ms, -8, -8)[:1], *rounds(base_ms, -7, -7)])
    second = run(spark, settings, marked)
    assert sum(r["events_late"] for r in second.values()) == 1
    assert sum(r["events_consumed"] for r in second.values()) == 3
