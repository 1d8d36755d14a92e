"""The streaming job on a real Spark standalone cluster: one master, two 1-core workers.

The cluster (bench/spark_cluster.py) runs from the installed pyspark on 127.0.0.1; the job
is a separate driver process (`python -m streaming.spark.standalone --master spark://...`) whose
executors run on the two workers. Checkpoints are in the test's tmp dir, which every
executor sees (they all run on this machine), as a shared volume would be on Kubernetes.

1. The same input gives the same bundle snapshots on the cluster as in local mode, batch by
   batch, and both equal the plain-Python roll-up.
2. SIGKILL the driver mid-stream, restart it against the same cluster and checkpoint:
   every event is counted exactly once (the checks of test_job_restart.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from balancer.core.bundles import NamespaceBundles
from bench.spark_cluster import SparkCluster, spark_cluster
from streaming.driver.jsonl_reports import read_reports
from tests.job_process import (
    SLIDE_S,
    WINDOW_S,
    check_counted_exactly_once,
    kill_mid_stream_then_restart,
    restart_events,
    run_to_end,
    start_job,
)
from tests.kafka_broker import Broker
from tests.stream_events import (
    BASE_MS,
    check_bundles,
    encode,
    event,
    expected_bundles,
    expected_windows,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

NAMESPACE = "t/ns"
TOPICS = [f"persistent://{NAMESPACE}/cluster-{i}" for i in range(16)]
MINUTES = 12
# Per partition, events are in time order and the batches take equal shares of both
# partitions, so no event falls behind the watermark: every window holds all its events.
MAX_OFFSETS_PER_TRIGGER = 48


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    with spark_cluster(workers=2, cores=1, memory="1g") as running:
        yield running


def _events() -> list[dict[str, Any]]:
    return [
        event(
            topic,
            BASE_MS + k * 60_000 + i * 100,
            rate_in=float(k * 16 + i),
            tput_out=1000.0 + i,
            storage=k * 1000 + i,
            producers=i % 3,
            consumers=k % 2,
        )
        for k in range(MINUTES)
        for i, topic in enumerate(TOPICS)
    ]


def _snapshots(reports: dict[int, dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """batch id -> (window end, events consumed, bundles without timings), comparable."""
    out = {}
    for batch_id, report in reports.items():
        bundles = sorted(
            (
                b["cluster"],
                b["bundle"],
                b["window_end_ms"],
                b["topic_count"],
                b["session_count"],
                b["reported_topics"],
                pytest.approx(b["msg_rate_in"]),
                pytest.approx(b["msg_rate_out"]),
                pytest.approx(b["msg_throughput_in"]),
                pytest.approx(b["msg_throughput_out"]),
            )
            for b in report["bundles"]
        )
        out[batch_id] = (report["window_end_ms"], report["events_consumed"], bundles)
    return out


def test_the_cluster_gives_the_bundle_snapshots_of_local_mode(
    cluster: SparkCluster, kafka: Broker, tmp_path: Path
) -> None:
    events = _events()
    topic = kafka.new_topic(partitions=2, prefix="cluster")
    for partition in (0, 1):
        mine = [e for e in events if TOPICS.index(e["topic"]) % 2 == partition]
        kafka.produce(topic, [encode(e) for e in mine], partition=partition)

    runs = {}
    for name, master in (("local", "local[2]"), ("cluster", cluster.master_url)):
        work = tmp_path / name
        work.mkdir()
        job = start_job(
            kafka,
            topic,
            work,
            "--available-now",
            master=master,
            max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER,
        )
        run_to_end(job, work)
        runs[name] = read_reports(work / "reports.jsonl")

    # The cluster run had an executor on each worker (one core each).
    apps = cluster.state()["completedapps"]
    assert [app["cores"] for app in apps] == [2]

    local, on_cluster = runs["local"], runs["cluster"]
    assert _snapshots(on_cluster) == _snapshots(local)
    assert sum(r["events_consumed"] for r in on_cluster.values()) == len(events)

    expected = expected_windows(events, window_ms=WINDOW_S * 1000, slide_ms=SLIDE_S * 1000)
    initial = NamespaceBundles.initial(NAMESPACE)
    closing = [r for r in on_cluster.values() if r["window_end_ms"]]
    assert len(closing) >= 3, "too few snapshots to compare"
    for report in closing:
        check_bundles(
            report, expected_bundles(expected, report["window_end_ms"], initial), NAMESPACE
        )


def test_driver_sigkill_then_restart_on_the_cluster_counts_every_event_once(
    cluster: SparkCluster, kafka: Broker, tmp_path: Path
) -> None:
    events = restart_events()
    reports = kill_mid_stream_then_restart(kafka, tmp_path, events, master=cluster.master_url)
    check_counted_exactly_once(events, reports)
