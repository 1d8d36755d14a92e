"""`kafka.source: native`: raw records -> mapInArrow parsing -> the same job and results.

Spark's own `kafka` format needs the spark-sql-kafka connector jars, which are not installed
here (streaming.spark.kafka_connector says which); with them, `kafka_source="native"` reads
through it. Without them, the native path's own code after the reader (raw rows, parsed by
`mapInArrow` with the same validator) runs over the Python source in raw mode, swapped in
for Spark's reader, and must give the same results as parsing in the reader.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import streaming.spark.job
from balancer.core.report import StaticLayouts
from streaming.driver.jsonl_reports import JsonlReportHandler, read_reports
from streaming.read.source import SOURCE_NAME
from streaming.spark.job import StreamSettings, run_available
from streaming.spark.kafka_connector import connector_problem
from tests.kafka_broker import Broker
from tests.stream_events import BASE_MS, encode, event, expected_windows, local_settings

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TOPICS = [f"persistent://t/ns/native-{i}" for i in range(6)]


def _run(kafka: Broker, spark: Any, work: Path, **settings: Any) -> dict[int, dict[str, Any]]:
    topic = kafka.new_topic(partitions=2, prefix="native")
    events = [
        event(t, BASE_MS + k * 60_000 + i, rate_in=float(k * 10 + i), storage=k * 100 + i)
        for k in range(10)
        for i, t in enumerate(TOPICS)
    ]
    values = [encode(e) for e in events]
    values[5:5] = [b"{oops", b"\xff\xfe"]
    kafka.produce(topic, values)
    config = local_settings(
        kafka.bootstrap_servers,
        topic,
        work,
        # expected_windows below is computed for these windows, not the defaults.
        window_s=300,
        slide_s=60,
        watermark_s=120,
        **settings,
    )
    handler = JsonlReportHandler(work / "reports.jsonl", topics_for_all=True)
    run_available(spark, config, handler, StaticLayouts(), timeout_s=300)
    reports = read_reports(work / "reports.jsonl")
    rejected: Counter[str] = Counter()
    for r in reports.values():
        rejected.update(r["events_rejected"])
    assert rejected == Counter({"bad_json": 1, "bad_encoding": 1})
    assert sum(r["events_consumed"] for r in reports.values()) == len(events) + 2
    expected = expected_windows(events, window_ms=300_000, slide_ms=60_000)
    newest = max(reports.values(), key=lambda r: r["window_end_ms"])
    topics = {t["topic"]: t for b in newest["bundles"] for t in b["topics"]}
    assert set(topics) == set(TOPICS)
    for name, got in topics.items():
        want = expected[("c1", name, newest["window_end_ms"])]
        assert got["msg_rate_in"] == pytest.approx(want.msg_rate_in)
        assert got["storage_size"] == want.storage_size
    return reports


def _python_source_raw(spark: Any, settings: StreamSettings) -> Any:
    """The raw rows Spark's `kafka` format gives, read by our source in raw mode."""
    options = settings.source_options(raw=True).to_options()
    return spark.readStream.format(SOURCE_NAME).options(**options).load()


def test_raw_records_parsed_by_map_in_arrow_give_the_same_results(
    kafka: Broker, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming.spark.job, "read_native_raw", _python_source_raw)
    _run(kafka, spark, tmp_path, kafka_source="native")


def test_native_kafka_format_when_the_connector_is_installed(
    kafka: Broker, spark: Any, tmp_path: Path
) -> None:
    missing = connector_problem()
    if missing is not None:
        pytest.skip(f"Spark's Kafka connector is not installed: {missing}")
    _run(kafka, spark, tmp_path, kafka_source="native")
