"""The whole stack under faults (issue 16): a Kafka broker restart and a dead entry cluster.

The real `pulsar-balancer run --config` process, with a Kafka-protocol broker of this test's
own (it is restarted mid-run: tansu comes back empty, as after a crash of a broker that lost
its disk), against the two-cluster simulator whose entry cluster `east` goes down. The hot
namespace lives on `west`: its bundles must still be split, each exactly once.

The second case also crashes the balancer (SIGKILL) just after the broker came back: the
restarted job replays the batch it had planned on the records the broker lost (a replayed
read task once waited for them until it timed out, on every restart).
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from balancer.kafka.embedded import EmbeddedKafka, free_port
from balancer.kafka.topics import ensure_topics
from tests.e2e.harness import BalancerProcess, wait_for, write_config
from tests.e2e.test_run_e2e import HOT, STATS_PARTITIONS, hot_bundles_at_start, start_sim

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

# Restarts a supervisor (Kubernetes) would make if the stream ends; the run must not need more.
MAX_RESTARTS = 2


def _metric(process: BalancerProcess, name: str) -> float | None:
    """A sample of the balancer's own /metrics, read from its start-up line's endpoint."""
    import urllib.request

    found = re.search(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", process.text())
    if not found:
        return None
    try:
        with urllib.request.urlopen(found.group(1), timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    values = re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    return sum(float(v) for v in values) if values else None


@pytest.mark.parametrize("crash_after_broker_restart", [False, True], ids=["survive", "crash"])
def test_a_broker_restart_and_a_dead_entry_cluster_still_split_west_exactly_once(
    tmp_path: Path, crash_after_broker_restart: bool
) -> None:
    port = free_port()
    broker = EmbeddedKafka.start(port=port, log_path=tmp_path / "tansu-1.log")
    sim = start_sim()
    processes: list[BalancerProcess] = []
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        topics = {topic: STATS_PARTITIONS, f"{topic}-dlq": 1}
        ensure_topics(broker.bootstrap_servers, topics)
        config = write_config(
            tmp_path,
            sim=sim,
            bootstrap_servers=broker.bootstrap_servers,
            mode="apply",
            stats_topic=topic,
        )
        hot = set(hot_bundles_at_start())

        def start(n: int) -> BalancerProcess:
            process = BalancerProcess(config, tmp_path, tmp_path / f"summary-{n}.json").start()
            processes.append(process)
            return process

        process = start(0)
        wait_for(
            lambda: "metrics: http://" in process.text(),
            timeout_s=120,
            what="the metrics endpoint",
            process=process,
        )
        # east, the first-listed (entry) cluster, dies for the rest of the run, before any
        # decision: everything west gets is decided and applied without east.
        sim.stop_cluster("east")
        assert sim.model.splits == []
        wait_for(
            lambda: process.batches() >= 2, timeout_s=240, what="two micro-batches", process=process
        )
        # Kafka goes away for a few seconds and comes back on the same port, empty.
        broker.stop()
        time.sleep(3)
        broker = EmbeddedKafka.start(port=port, log_path=tmp_path / "tansu-2.log")
        ensure_topics(broker.bootstrap_servers, topics)  # what the operator's Kafka keeps
        if crash_after_broker_restart:
            time.sleep(5)  # the collector publishes to the new broker meanwhile
            process.kill()  # mid-batch: the restart replays the batch planned before
            process = start(len(processes))

        def west_split() -> bool:
            return {s.parent for s in sim.model.splits if s.namespace == HOT} >= hot

        deadline = time.monotonic() + 420
        while not west_split():
            assert time.monotonic() < deadline, (
                "west's hot bundles were not split:\n" + process.text()[-4000:]
            )
            if not process.alive():
                # The documented behaviour for a Kafka outage longer than the source's
                # timeouts: exit 1 with the cause in one line; the supervisor restarts it.
                code = process.process.wait() if process.process else None
                assert code == 1, process.text()[-3000:]
                summary = process.read_summary()
                assert summary["stream_error"] and "\n" not in summary["stream_error"]
                assert len(processes) <= MAX_RESTARTS, process.text()[-3000:]
                process = start(len(processes))
            time.sleep(1)
        # The collector rebuilt its producer and kept publishing after the broker restart.
        if len(processes) == 1:
            wait_for(
                lambda: (
                    (_metric(process, "pulsar_balancer_collector_producer_rebuilds_total") or 0)
                    >= 1
                ),
                timeout_s=60,
                what="a rebuilt producer",
                process=process,
            )
        # More micro-batches in which an over-eager balancer would split again.
        seen = process.batches()
        wait_for(
            lambda: process.batches() >= seen + 4,
            timeout_s=180,
            what="four more micro-batches",
            process=process,
        )
        assert process.stop() == 0, process.text()[-3000:]
    finally:
        for p in processes:
            if p.alive():
                p.kill()
        sim.stop()
        broker.stop()
    # Each hot bundle of west split exactly once, on west; nothing reached dead east.
    parents = [s.parent for s in sim.model.splits if s.namespace == HOT]
    assert sorted(parents) == sorted(hot), parents
    assert all(s.cluster == "west" for s in sim.model.splits if s.namespace == HOT)
    with sqlite3.connect(tmp_path / "journal.sqlite3") as db:
        twice = db.execute(
            "SELECT action_key, COUNT(*) FROM actions WHERE result = 'applied' "
            "GROUP BY action_key HAVING COUNT(*) > 1"
        ).fetchall()
    assert twice == []
