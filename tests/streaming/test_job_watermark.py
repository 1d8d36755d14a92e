"""Event time cannot be poisoned (issue 16): a real Kafka-protocol broker and real Spark.

One event stamped a day ahead used to advance the watermark a day, and every on-time event
after it was late, across restarts. Now the read task dead-letters it
(`timestamp_in_future`), and a checkpoint poisoned before the rule existed is refused at
start and repaired by `reset-watermark`, keeping the offsets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from balancer.app.cli import main
from balancer.core.report import StaticLayouts
from streaming.driver.jsonl_reports import JsonlReportHandler, read_reports
from streaming.spark.checkpoint import FutureWatermarkError, check_watermark, reset_watermark
from streaming.spark.job import StreamSettings, run_available
from tests.kafka_broker import Broker
from tests.stream_events import encode, event, local_settings

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DAY_MS = 86_400_000
SKEW_MS = 600_000
TOPICS = ("t/ns/a", "t/ns/b")


def minutes(now_ms: int, first: int, last: int) -> list[bytes]:
    """One event per topic per minute, from `first` to `last` minutes relative to now."""
    return [encode(event(t, now_ms + m * 60_000)) for m in range(first, last + 1) for t in TOPICS]


def run(spark: Any, settings: StreamSettings, work: Path) -> dict[int, dict[str, Any]]:
    reports = work / "reports.jsonl"
    reports.unlink(missing_ok=True)
    run_available(spark, settings, JsonlReportHandler(reports), StaticLayouts(), timeout_s=300)
    return read_reports(reports)


def totals(reports: dict[int, dict[str, Any]]) -> tuple[int, int, dict[str, int]]:
    rejected: dict[str, int] = {}
    for r in reports.values():
        for reason, n in r["events_rejected"].items():
            rejected[reason] = rejected.get(reason, 0) + n
    consumed = sum(r["events_consumed"] for r in reports.values())
    return consumed, sum(r["events_late"] for r in reports.values()), rejected


def settings_for(kafka: Broker, work: Path) -> StreamSettings:
    topic = kafka.new_topic(partitions=1, prefix="poison")
    return local_settings(
        kafka.bootstrap_servers, topic, work, window_s=60, slide_s=60, watermark_s=60,
        max_future_skew_s=SKEW_MS // 1000,
    )  # fmt: skip


def test_an_event_a_day_ahead_is_dead_lettered_and_later_events_stay_on_time(
    kafka: Broker, spark: Any, tmp_path: Path
) -> None:
    settings = settings_for(kafka, tmp_path)
    now_ms = int(time.time() * 1000)
    poison = encode(event("t/ns/a", now_ms + DAY_MS))
    kafka.produce(settings.topic, [*minutes(now_ms, -10, -6), poison])
    first = run(spark, settings, tmp_path)
    kafka.produce(settings.topic, minutes(now_ms, -4, -2))
    second = run(spark, settings, tmp_path)

    assert totals(first) == (11, 0, {"timestamp_in_future": 1})
    assert totals(second) == (6, 0, {})  # before the rule: all 6 late
    watermark_ms = max(r["watermark_ms"] for r in second.values())
    assert 0 < watermark_ms <= now_ms
    newest = max(r["newest_event_ms"] for r in second.values())
    assert newest == now_ms - 2 * 60_000
    check_watermark(settings.checkpoint_dir, now_ms=now_ms, max_future_skew_ms=SKEW_MS)


def test_a_poisoned_checkpoint_is_refused_and_reset_keeps_the_offsets(
    kafka: Broker, spark: Any, tmp_path: Path
) -> None:
    settings = settings_for(kafka, tmp_path)
    now_ms = int(time.time() * 1000)
    kafka.produce(settings.topic, minutes(now_ms, -12, -10))
    run(spark, settings, tmp_path)
    # A checkpoint poisoned before the rule: its stored watermark a day ahead.
    reset_watermark(settings.checkpoint_dir, watermark_ms=now_ms + DAY_MS)

    with pytest.raises(FutureWatermarkError, match="reset-watermark") as refused:
        check_watermark(settings.checkpoint_dir, now_ms=now_ms, max_future_skew_ms=SKEW_MS)
    assert "\n" not in str(refused.value)
    # Spark resumes with that watermark: every on-time event is late (the fault seen).
    kafka.produce(settings.topic, minutes(now_ms, -8, -7))
    assert totals(run(spark, settings, tmp_path)) == (4, 4, {})

    assert main(["reset-watermark", "--checkpoint-dir", settings.checkpoint_dir]) == 0
    check_watermark(settings.checkpoint_dir, now_ms=now_ms, max_future_skew_ms=SKEW_MS)
    kafka.produce(settings.topic, minutes(now_ms, -5, -3))
    # Only the new events are read (offsets kept), and none is late.
    assert totals(run(spark, settings, tmp_path)) == (6, 0, {})
