"""Test helper: the streaming job as a separate driver process
(`python -m streaming.spark.standalone`).

Shared by the crash/restart tests in local mode and on a standalone cluster: start the job,
SIGKILL it (driver and its JVM) once it has written some reports, restart it from the same
checkpoint with Trigger.AvailableNow, and check that every event was counted exactly once.
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

from balancer.app.config import SparkConfig
from streaming.driver.jsonl_reports import read_reports
from tests.kafka_broker import Broker
from tests.stream_events import BASE_MS, encode, event, expected_windows

# expected_windows is computed for these windows: the jobs below all run with them.
WINDOW_S, SLIDE_S, WATERMARK_S = 300, 60, 120
RESTART_TOPICS = [f"persistent://t/ns/restart-{i}" for i in range(8)]
RESTART_MINUTES = 24


def restart_events() -> list[dict[str, Any]]:
    rng = random.Random(11)
    return [
        event(
            topic,
            BASE_MS + k * 60_000 + i * 50,
            rate_in=rng.uniform(0, 100),
            storage=rng.randrange(10**6),
            producers=rng.randrange(4),
        )
        for k in range(RESTART_MINUTES)
        for i, topic in enumerate(RESTART_TOPICS)
    ]


def start_job(
    kafka: Broker,
    topic: str,
    work: Path,
    *extra: str,
    master: str = "local[2]",
    max_offsets_per_trigger: int = 24,
) -> subprocess.Popen[bytes]:
    """The job on `topic`, checkpoint/reports/dead letters/log in `work`."""
    args = [
        sys.executable, "-m", "streaming.spark.standalone",
        "--bootstrap", kafka.bootstrap_servers,
        "--topic", topic,
        "--checkpoint", str(work / "checkpoint"),
        "--reports", str(work / "reports.jsonl"),
        "--dead-letter-dir", str(work / "dead"),
        "--master", master,
        "--num-buckets", "4",
        "--shuffle-partitions", "2",
        f"--jvm-options={SparkConfig().jvm_options}",  # "=": the value starts with "-"
        "--max-future-skew-s", "600",
        "--max-offsets-per-trigger", str(max_offsets_per_trigger),
        "--trigger-interval-s", "0.2",
        "--topics-for-all",
        "--window-s", str(WINDOW_S), "--slide-s", str(SLIDE_S), "--watermark-s", str(WATERMARK_S),
        *extra,
    ]  # fmt: skip
    # The driver's scratch space in `work`: a SIGKILLed driver cannot remove it itself.
    env = {**os.environ, "SPARK_LOCAL_DIRS": str(work / "spark-local")}
    with (work / "job.log").open("ab") as log:
        return subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


def log_tail(work: Path, chars: int = 3000) -> str:
    path = work / "job.log"
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def run_to_end(process: subprocess.Popen[bytes], work: Path, timeout_s: float = 300) -> None:
    """Wait for an AvailableNow run to finish; it must exit 0."""
    try:
        assert process.wait(timeout=timeout_s) == 0, log_tail(work)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def kill_mid_stream_then_restart(
    kafka: Broker, work: Path, events: list[dict[str, Any]], *, master: str = "local[2]"
) -> Path:
    """Produce `events`, SIGKILL the job after 3 reports, restart it; the reports file."""
    topic = kafka.new_topic(partitions=2, prefix="restart")
    # Each Kafka topic partition holds half the Pulsar topics, in time order, so the batches
    # (shared in proportion to the backlog) move both through event time together and no
    # event falls behind the watermark. Keyless production put the producer's sticky batches
    # on either partition: one partition could run minutes ahead, the other's next events
    # then missed windows already closed, and a window differed from plain Python.
    names = sorted({e["topic"] for e in events})
    for partition in (0, 1):
        mine = [e for e in events if names.index(e["topic"]) % 2 == partition]
        kafka.produce(topic, [encode(e) for e in mine], partition=partition)
    reports = work / "reports.jsonl"

    first = start_job(kafka, topic, work, master=master)
    try:
        deadline = time.monotonic() + 240
        while _lines(reports) < 3:
            assert first.poll() is None, log_tail(work)
            assert time.monotonic() < deadline, "the job wrote no reports"
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        first.wait()
    seen_before_kill = read_reports(reports)
    assert sum(r["events_consumed"] for r in seen_before_kill.values()) < len(events)

    run_to_end(start_job(kafka, topic, work, "--available-now", master=master), work)
    return reports


def check_counted_exactly_once(events: list[dict[str, Any]], reports: Path) -> None:
    """The distinct batches add up to the events; each closed window equals plain Python."""
    lines = reports.read_text().splitlines()
    final = read_reports(reports)
    assert sorted(final) == list(range(len(final))), "batch ids must be contiguous"
    assert sum(r["events_consumed"] for r in final.values()) == len(events)
    assert sum(r["events_late"] for r in final.values()) == 0, "the data left events behind"
    assert len(lines) >= len(final)  # a batch cut by the kill is replayed under its own id
    expected = expected_windows(events, window_ms=WINDOW_S * 1000, slide_ms=SLIDE_S * 1000)
    topics_in_events = {e["topic"] for e in events}
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
    assert checked >= len(topics_in_events) * 2
