"""Test helper: topic-stats events for the stream tests, a plain-Python reference, settings.

`expected_windows` computes per (cluster, topic, window end) what the job must output,
written independently of `streaming.stage.windows`: rates averaged, sizes and counts taken from
the newest sample (the test data has no two samples of a topic in one millisecond), over
windows `[start, start + window)` with starts on multiples of the slide.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import SparkConfig
from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from streaming.spark.job import StreamSettings

BASE_MS = 1_700_000_040_000  # a multiple of 60 s


def event(
    topic: str,
    t_ms: int,
    *,
    cluster: str = "c1",
    rate_in: float = 1.0,
    rate_out: float = 2.0,
    tput_in: float = 100.0,
    tput_out: float = 200.0,
    storage: int = 1000,
    backlog: int = 10,
    offloaded: int = 0,
    producers: int = 1,
    consumers: int = 1,
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "topic": topic,
        "timestamp_ms": t_ms,
        "msgRateIn": rate_in,
        "msgRateOut": rate_out,
        "msgThroughputIn": tput_in,
        "msgThroughputOut": tput_out,
        "storageSize": storage,
        "backlogSize": backlog,
        "offloadedStorageSize": offloaded,
        "producerCount": producers,
        "consumerCount": consumers,
    }


def local_settings(
    bootstrap_servers: str, topic: str, work: Path, **overrides: Any
) -> StreamSettings:
    """Job settings for a test: 2 local cores, 2 shuffle partitions, dead letters in `work`."""
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers,
        "topic": topic,
        "checkpoint_dir": str(work / "checkpoint"),
        "dead_letter_dir": str(work / "dead"),
        "spark_master": "local[2]",
        "num_buckets": 4,
        "shuffle_partitions": 2,
        "jvm_options": SparkConfig().jvm_options,
        "max_offsets_per_trigger": None,
        "trigger_interval_s": 30.0,
        "max_future_skew_s": 600,
        **overrides,
    }
    return StreamSettings(**values)


def encode(e: dict[str, Any]) -> bytes:
    return json.dumps(e).encode()


@dataclass
class Expected:
    msg_rate_in: float
    msg_rate_out: float
    msg_throughput_in: float
    msg_throughput_out: float
    storage_size: int
    backlog_size: int
    producer_count: int
    consumer_count: int
    samples: int


def expected_windows(
    events: Iterable[dict[str, Any]], *, window_ms: int, slide_ms: int
) -> dict[tuple[str, str, int], Expected]:
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        t = e["timestamp_ms"]
        start = (t // slide_ms) * slide_ms
        while start > t - window_ms:
            groups[(e["cluster"], e["topic"], start + window_ms)].append(e)
            start -= slide_ms
    out = {}
    for key, es in groups.items():

        def latest(field: str, es: list[dict[str, Any]] = es) -> int:
            return int(max((x["timestamp_ms"], x[field]) for x in es)[1])

        n = len(es)
        out[key] = Expected(
            msg_rate_in=sum(x["msgRateIn"] for x in es) / n,
            msg_rate_out=sum(x["msgRateOut"] for x in es) / n,
            msg_throughput_in=sum(x["msgThroughputIn"] for x in es) / n,
            msg_throughput_out=sum(x["msgThroughputOut"] for x in es) / n,
            storage_size=latest("storageSize"),
            backlog_size=latest("backlogSize"),
            producer_count=latest("producerCount"),
            consumer_count=latest("consumerCount"),
            samples=n,
        )
    return out


def expected_bundles(
    windows: dict[tuple[str, str, int], Expected],
    window_end_ms: int,
    layout: NamespaceBundles,
) -> dict[str, dict[str, float]]:
    """Bundle text -> summed rates and counts of the topics of one window (one namespace)."""
    out: dict[str, dict[str, float]] = {}
    for (_, topic, end), v in windows.items():
        if end != window_end_ms:
            continue
        bundle = str(layout.find(hash_position(topic)))
        agg = out.setdefault(
            bundle, {"msg_rate_in": 0.0, "msg_throughput_out": 0.0, "topics": 0, "sessions": 0}
        )
        agg["msg_rate_in"] += v.msg_rate_in
        agg["msg_throughput_out"] += v.msg_throughput_out
        agg["topics"] += 1
        agg["sessions"] += v.producer_count + v.consumer_count
    return out


def check_bundles(
    report: dict[str, Any], expected: dict[str, dict[str, float]], namespace: str
) -> None:
    """A JSON report's bundles (one namespace of cluster c1) equal `expected_bundles`."""
    got = {b["bundle"]: b for b in report["bundles"]}
    assert set(got) == set(expected)
    for bundle, want in expected.items():
        b = got[bundle]
        assert b["cluster"] == "c1" and b["namespace"] == namespace
        assert b["window_end_ms"] == report["window_end_ms"]
        assert b["msg_rate_in"] == pytest.approx(want["msg_rate_in"])
        assert b["msg_throughput_out"] == pytest.approx(want["msg_throughput_out"])
        assert b["topic_count"] == want["topics"]
        assert b["session_count"] == want["sessions"]
        assert b["reported_topics"] == b["known_topics"] == want["topics"]
