"""The streaming job end to end, in-process: real broker (tansu), real local Spark.

One scenario runs the job twice on the same checkpoint (Trigger.AvailableNow):
stage 1: twelve topics reporting every 60 s for 10 minutes, with bad messages of every kind
between them; stage 2: a bundle is split, ten more minutes of events plus two late ones.
The tests then check the recorded reports, dead letters and windows against a plain-Python
computation over the same events.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import SparkConfig
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.report import StaticLayouts
from streaming.driver.jsonl_reports import JsonlReportHandler, read_reports
from streaming.spark.job import StreamSettings, run_available
from tests.kafka_broker import Broker
from tests.stream_events import (
    BASE_MS,
    Expected,
    check_bundles,
    encode,
    event,
    expected_bundles,
    expected_windows,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

NAMESPACE = "t/ns"
TOPICS = [f"persistent://{NAMESPACE}/topic-{i}" for i in range(12)]
WINDOW_MS, SLIDE_MS, WATERMARK_MS = 300_000, 60_000, 120_000

GOOD = event(TOPICS[0], BASE_MS)
# (message, expected reject reasons): every kind of bad input the validator knows.
BAD_MESSAGES: list[tuple[bytes, list[str]]] = [
    (b'{"cluster": "c1", "topic": ', ["bad_json"]),
    (b"\xff\xfe\x00\x01binary garbage", ["bad_encoding"]),
    (b"", ["bad_json"]),
    (b"[1, 2, 3]", ["not_an_object"]),
    (encode({k: v for k, v in GOOD.items() if k != "msgRateIn"}), ["missing_field"]),
    (encode({**GOOD, "colour": "blue"}), ["unknown_field"]),
    (encode({**GOOD, "msgRateIn": "fast"}), ["wrong_type"]),
    (encode({**GOOD, "storageSize": 2**70}), ["wrong_type"]),  # a huge value
    (
        json.dumps({**GOOD, "msgRateOut": 1e999}).replace("Infinity", "1e999").encode(),
        ["not_finite"],
    ),
    (encode({**GOOD, "backlogSize": -5}), ["negative_value"]),
    (encode({**GOOD, "topic": "persistent://t/ns"}), ["invalid_topic"]),
    (encode({**GOOD, "timestamp_ms": BASE_MS // 1000}), ["timestamp_out_of_range"]),
    (b'{"x": "' + b"a" * (9 * 1024 * 1024) + b'"}', ["too_large"]),
    (b"NaN", ["bad_json"]),
    # an envelope: one good event (counted below) and one bad one
    (
        json.dumps(
            {"events": [event(TOPICS[1], BASE_MS + 5), {**GOOD, "producerCount": 1.5}]}
        ).encode(),
        ["wrong_type"],
    ),
]


def stage_events(first_minute: int, minutes: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for k in range(first_minute, first_minute + minutes):
        for i, topic in enumerate(TOPICS):
            out.append(
                event(
                    topic,
                    BASE_MS + k * 60_000 + i * 100,
                    rate_in=rng.uniform(0, 1000),
                    rate_out=rng.uniform(0, 1000),
                    tput_in=rng.uniform(0, 1e6),
                    tput_out=rng.uniform(0, 1e6),
                    storage=rng.randrange(0, 10**9),
                    backlog=rng.randrange(0, 10**6),
                    producers=rng.randrange(0, 5),
                    consumers=rng.randrange(0, 5),
                )
            )
    return out


@dataclass
class Scenario:
    good: list[dict[str, Any]]
    reports: dict[int, dict[str, Any]]
    dead_letters: list[Any]
    stage1_batches: set[int]
    split_parent: BundleRange
    split_layout: NamespaceBundles


@pytest.fixture(scope="module")
def scenario(kafka: Broker, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    work = tmp_path_factory.mktemp("job")
    topic = kafka.new_topic(partitions=2, prefix="stats")
    settings = StreamSettings(
        bootstrap_servers=kafka.bootstrap_servers,
        topic=topic,
        checkpoint_dir=str(work / "checkpoint"),
        spark_master="local[2]",
        num_buckets=4,
        shuffle_partitions=2,
        jvm_options=SparkConfig().jvm_options,
        max_offsets_per_trigger=None,
        trigger_interval_s=30.0,
        max_future_skew_s=600,
        # The expected values below are computed with these windows, not the defaults.
        window_s=WINDOW_MS // 1000,
        slide_s=SLIDE_MS // 1000,
        watermark_s=WATERMARK_MS // 1000,
    )
    layouts = StaticLayouts()
    reports_path = work / "reports.jsonl"
    handler = JsonlReportHandler(reports_path, topics_for_all=True, offload_min_bytes=500_000_000)

    stage1 = stage_events(0, 10, seed=1)
    messages = [encode(e) for e in stage1]
    for n, (bad, _) in enumerate(BAD_MESSAGES):
        messages.insert(7 * n + 3, bad)  # between good ones
    kafka.produce(topic, messages)
    run_available(spark, settings, handler, layouts, timeout_s=300)
    stage1_batches = set(read_reports(reports_path))

    # A split: later windows must map the topics of the parent to its children.
    initial = layouts.layout("c1", NAMESPACE)
    parent = initial.bundles[0]
    split_layout, _ = initial.split(parent, [parent.lower + parent.width // 2])
    layouts.set_layout("c1", split_layout)
    stage2 = stage_events(10, 10, seed=2)
    late = [event(TOPICS[2], BASE_MS), event(TOPICS[3], BASE_MS + 1)]
    kafka.produce(topic, [encode(e) for e in stage2 + late])
    run_available(spark, settings, handler, layouts, timeout_s=300)

    dead = kafka.read_all(settings.dead_letter_topic_name)
    envelope_good = [event(TOPICS[1], BASE_MS + 5)]
    return Scenario(
        good=stage1 + stage2 + envelope_good,
        reports=read_reports(reports_path),
        dead_letters=dead,
        stage1_batches=stage1_batches,
        split_parent=parent,
        split_layout=split_layout,
    )


def _report_with_window(reports: dict[int, dict[str, Any]], batches: set[int]) -> dict[str, Any]:
    with_windows = [r for b, r in reports.items() if b in batches and r["window_end_ms"]]
    assert with_windows, "no batch closed a window"
    return max(with_windows, key=lambda r: r["window_end_ms"])


def _expected(s: Scenario) -> dict[tuple[str, str, int], Expected]:
    return expected_windows(s.good, window_ms=WINDOW_MS, slide_ms=SLIDE_MS)


def test_newest_closed_window_is_the_last_one_the_watermark_passed(scenario: Scenario) -> None:
    report = _report_with_window(scenario.reports, scenario.stage1_batches)
    max_event = max(
        e["timestamp_ms"] for e in scenario.good if e["timestamp_ms"] < BASE_MS + 600_000
    )
    watermark = max_event - WATERMARK_MS
    assert report["window_end_ms"] == (watermark // SLIDE_MS) * SLIDE_MS


def test_topic_window_values_equal_plain_python(scenario: Scenario) -> None:
    expected = _expected(scenario)
    for batches in (scenario.stage1_batches, set(scenario.reports) - scenario.stage1_batches):
        report = _report_with_window(scenario.reports, batches)
        end = report["window_end_ms"]
        topics = {t["topic"]: t for b in report["bundles"] for t in b["topics"]}
        assert set(topics) == set(TOPICS)
        for topic, got in topics.items():
            want = expected[("c1", topic, end)]
            assert got["position"] == hash_position(topic)
            assert got["msg_rate_in"] == pytest.approx(want.msg_rate_in)
            assert got["msg_rate_out"] == pytest.approx(want.msg_rate_out)
            assert got["msg_throughput_in"] == pytest.approx(want.msg_throughput_in)
            assert got["msg_throughput_out"] == pytest.approx(want.msg_throughput_out)
            assert got["storage_size"] == want.storage_size
            assert got["backlog_size"] == want.backlog_size
            assert got["producer_count"] == want.producer_count
            assert got["consumer_count"] == want.consumer_count


def test_bundle_roll_up_equals_plain_python(scenario: Scenario) -> None:
    report = _report_with_window(scenario.reports, scenario.stage1_batches)
    initial = NamespaceBundles.initial(NAMESPACE)
    expected = expected_bundles(_expected(scenario), report["window_end_ms"], initial)
    check_bundles(report, expected, NAMESPACE)


def test_after_a_split_later_windows_map_to_the_children(scenario: Scenario) -> None:
    later = set(scenario.reports) - scenario.stage1_batches
    report = _report_with_window(scenario.reports, later)
    bundles = {b["bundle"] for b in report["bundles"]}
    assert str(scenario.split_parent) not in bundles
    children = {
        str(b) for b in scenario.split_layout.bundles if scenario.split_parent.contains(b.lower)
    }
    assert children & bundles, "no topic reported in the children of the split bundle"
    expected = expected_bundles(_expected(scenario), report["window_end_ms"], scenario.split_layout)
    check_bundles(report, expected, NAMESPACE)


def test_every_bad_message_is_dead_lettered_with_its_reason(scenario: Scenario) -> None:
    by_value: dict[bytes, list[str]] = {}
    for record in scenario.dead_letters:
        headers = {k: v.decode() for k, v in record.headers}
        assert headers["source_offset"].isdigit() and headers["source_partition"].isdigit()
        assert headers["detail"]
        by_value.setdefault(record.value, []).append(headers["reason"])
    assert len(scenario.dead_letters) == sum(len(r) for _, r in BAD_MESSAGES)
    for message, reasons in BAD_MESSAGES:
        if len(message) > 1024 * 1024:  # kept truncated: only its prefix is stored
            stored = [v for v in by_value if v and message.startswith(v)]
            assert len(stored) == 1 and by_value[stored[0]] == reasons
        else:
            assert by_value[message] == reasons


def test_rejects_are_counted_by_reason_and_good_events_all_consumed(scenario: Scenario) -> None:
    rejected: Counter[str] = Counter()
    consumed = 0
    for report in scenario.reports.values():
        rejected.update(report["events_rejected"])
        consumed += report["events_consumed"]
    assert rejected == Counter(r for _, reasons in BAD_MESSAGES for r in reasons)
    late = 2
    assert consumed == len(scenario.good) + late + sum(rejected.values())


def test_late_events_are_counted(scenario: Scenario) -> None:
    assert sum(r["events_late"] for r in scenario.reports.values()) == 2


def test_lag_is_zero_once_caught_up(scenario: Scenario) -> None:
    lags = [r["kafka_lag"] for r in scenario.reports.values() if r["kafka_lag"]]
    assert lags and all(v == 0 for v in lags[-1].values())


def test_large_topics_are_reported_with_their_cluster(scenario: Scenario) -> None:
    report = _report_with_window(scenario.reports, scenario.stage1_batches)
    expected = _expected(scenario)
    end = report["window_end_ms"]
    want = {t for t in TOPICS if expected[("c1", t, end)].storage_size >= 500_000_000}
    got = {t["topic"] for c, t in report["large_topics"] if c == "c1"}
    assert got == want


def test_dead_letter_directory_is_replaced_not_appended(tmp_path: Path) -> None:
    from streaming.driver.deadletters import DeadLetter, DirectoryDeadLetters, read_directory

    sink = DirectoryDeadLetters(tmp_path, source_topic="s")
    letter = DeadLetter(b"\x00raw", "bad_json", "detail", 1, 42)
    sink.write(7, [letter])
    sink.write(7, [letter])  # a replayed batch
    rows = read_directory(tmp_path)
    assert [(r["raw"], r["reason"], r["source_offset"]) for r in rows] == [
        (b"\x00raw", "bad_json", 42)
    ]
