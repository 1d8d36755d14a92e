"""SIGKILL the job mid-stream, restart it from its checkpoint: every event counts exactly once.

The job runs as a subprocess (`python -m streaming.standalone`, its own JVM, RocksDB state store)
writing each batch report as a JSON line. Small micro-batches (max offsets per trigger) make
the kill land while batches are still being processed. After the restart (Trigger.AvailableNow) the
reports of the distinct batch ids must add up to exactly the events produced, and every
closed window's per-topic values must equal the plain-Python computation: an event read
twice or lost would change a count or an average.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from streaming.jsonl_reports import read_reports
from tests.kafka_broker import Broker
from tests.stream_events import BASE_MS, encode, event, expected_windows

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TOPICS = [f"persistent://t/ns/restart-{i}" for i in range(8)]
MINUTES = 24


def _events() -> list[dict[str, Any]]:
    rng = random.Random(11)
    return [
        event(
            topic,
            BASE_MS + k * 60_000 + i * 50,
            rate_in=rng.uniform(0, 100),
            storage=rng.randrange(10**6),
            producers=rng.randrange(4),
        )
        for k in range(MINUTES)
        for i, topic in enumerate(TOPICS)
    ]


def _job(kafka: Broker, topic: str, work: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "streaming.standalone",
        "--bootstrap", kafka.bootstrap_servers,
        "--topic", topic,
        "--checkpoint", str(work / "checkpoint"),
        "--reports", str(work / "reports.jsonl"),
        "--dead-letter-dir", str(work / "dead"),
        "--master", "local[2]",
        "--shuffle-partitions", "2",
        "--max-offsets-per-trigger", "24",
        "--trigger-interval-s", "0.2",
        "--topics-for-all",
        # expected_windows below is computed for these windows.
        "--window-s", "300", "--slide-s", "60", "--watermark-s", "120",
        *extra,
    ]  # fmt: skip
    log = (work / "job.log").open("ab")
    return subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ)
    )


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_sigkill_then_restart_counts_every_event_exactly_once(
    kafka: Broker, tmp_path: Path
) -> None:
    topic = kafka.new_topic(partitions=2, prefix="restart")
    events = _events()
    kafka.produce(topic, [encode(e) for e in events])
    reports = tmp_path / "reports.jsonl"

    first = _job(kafka, topic, tmp_path)
    try:
        deadline = time.monotonic() + 240
        while _lines(reports) < 3:
            assert first.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job wrote no reports"
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        first.wait()
    seen_before_kill = read_reports(reports)
    assert sum(r["events_consumed"] for r in seen_before_kill.values()) < len(events)

    second = _job(kafka, topic, tmp_path, "--available-now")
    try:
        assert second.wait(timeout=300) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)

    lines = reports.read_text().splitlines()
    final = read_reports(reports)
    assert sorted(final) == list(range(len(final))), "batch ids must be contiguous"
    assert sum(r["events_consumed"] for r in final.values()) == len(events)
    assert len(lines) >= len(final)  # a batch cut by the kill is replayed under its own id
    expected = expected_windows(events, window_ms=300_000, slide_ms=60_000)
    checked = 0
    for report in final.values():
        end = report["window_end_ms"]
        if not end:
            continue
        topics = {t["topic"]: t for b in report["bundles"] for t in b["topics"]}
        for name, got in topics.items():
            want = expected[("c1", name, end)]
            assert got["msg_rate_in"] == pytest.approx(want.msg_rate_in)
            assert got["storage_size"] == want.storage_size
            assert got["producer_count"] == want.producer_count
            checked += 1
    assert checked >= len(TOPICS) * 2
