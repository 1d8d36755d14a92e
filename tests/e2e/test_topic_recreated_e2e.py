"""The stats topic recreated with fewer partitions while the balancer is down (issue 32).

The real `pulsar-balancer run --config` process against the two-cluster simulator and the
session's Kafka-protocol broker. After a few micro-batches the balancer is stopped, the stats
topic is recreated with 2 partitions instead of 4, and the balancer started again on the same
checkpoint. The checkpoint's last batch is left uncommitted, as a crash between planning and
committing leaves it: the restart replays a batch whose planned ranges name partitions 2 and
3, which no longer exist. That replay once waited for them until the read task timed out,
and every restart did the same (a crash loop that only moving the checkpoint aside ended).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from balancer.kafka.topics import ensure_topics
from tests.e2e.harness import BalancerProcess, committed_offsets, wait_for, write_config
from tests.e2e.test_run_e2e import (
    HOT,
    STATS_PARTITIONS,
    hot_bundles_at_start,
    hot_bundles_split,
    start_sim,
)
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

NEW_PARTITIONS = 2
# A bound, not a speed check: a replayed read task that waits for a vanished partition fails
# its batch after 60 s (`read_timeout_s`) and the process exits 1, which fails the wait.
RESUME_TIMEOUT_S = 150
# Runs before the recreation, at most: each ends on a batch that read records or, now and then,
# on one that only moved the watermark (then the next run goes on).
FIRST_RUNS = 4


def _offset_line(path: Path) -> dict[str, int]:
    offsets: dict[str, int] = json.loads(path.read_text().splitlines()[-1])
    return offsets


def _last_batch(checkpoint: Path) -> int:
    batch = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert batch >= 1, "the first run handed on fewer than two batches"
    return batch


def _last_batch_ranges(checkpoint: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The last committed batch's planned (start, end) offsets per partition."""
    batch = _last_batch(checkpoint)
    start = _offset_line(checkpoint / "offsets" / str(batch - 1))
    end = _offset_line(checkpoint / "offsets" / str(batch))
    return start, end


def _uncommit_last_batch(checkpoint: Path) -> None:
    """Remove the commit marker of the last batch: Spark replays it at the next start, as
    after a crash mid-batch."""
    batch = _last_batch(checkpoint)
    (checkpoint / "commits" / str(batch)).unlink()
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)


def _recreate(bootstrap_servers: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.delete_topics([topic])
        deadline = time.monotonic() + 30
        while topic in admin.list_topics():  # deletion completes asynchronously
            assert time.monotonic() < deadline, f"topic {topic} was not deleted"
            time.sleep(0.2)
    finally:
        admin.close()
    assert ensure_topics(bootstrap_servers, {topic: partitions}) == [topic]


def test_a_stats_topic_recreated_with_fewer_partitions_resumes_the_stream(
    kafka: Broker, tmp_path: Path
) -> None:
    sim = start_sim()
    processes: list[BalancerProcess] = []
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka.bootstrap_servers, {topic: STATS_PARTITIONS, f"{topic}-dlq": 1})
        config = write_config(
            tmp_path, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply",
            stats_topic=topic,
        )  # fmt: skip
        checkpoint = tmp_path / "checkpoints"

        def start(n: int) -> BalancerProcess:
            process = BalancerProcess(config, tmp_path, tmp_path / f"summary-{n}.json").start()
            processes.append(process)
            return process

        gone = {str(p) for p in range(NEW_PARTITIONS, STATS_PARTITIONS)}

        def last_batch_reads_gone() -> bool:
            planned_start, planned_end = _last_batch_ranges(checkpoint)
            return any(planned_end.get(p, 0) > planned_start.get(p, 0) for p in gone)

        # The replayed batch must read from a partition that will no longer exist. A batch
        # that only moves the watermark (Spark's no-data batches) reads nothing, so a run that
        # stops right after one goes on (same checkpoint, topic unchanged) until it does not.
        for attempt in range(FIRST_RUNS):
            first = start(attempt)

            def three_batches(run: BalancerProcess = first) -> bool:
                return run.batches() >= 3

            wait_for(three_batches, timeout_s=150, what="three micro-batches", process=first)
            assert first.stop() == 0, first.text()[-3000:]
            if last_batch_reads_gone():
                break
        else:
            pytest.fail(f"no run of {FIRST_RUNS} ended on a batch that read partitions {gone}")
        _uncommit_last_batch(checkpoint)

        _recreate(kafka.bootstrap_servers, topic, NEW_PARTITIONS)
        second = start(FIRST_RUNS)
        wait_for(
            lambda: "metrics: http://" in second.text(),
            timeout_s=60,
            what="the restarted balancer",
            process=second,
        )
        wait_for(
            lambda: second.batches() >= 2,
            timeout_s=RESUME_TIMEOUT_S,
            what="two micro-batches after the topic was recreated",
            process=second,
        )
        # The stream goes on: the hot bundles get split (on the records of the new topic),
        # and more batches follow.
        hot = set(hot_bundles_at_start())
        wait_for(
            lambda: hot_bundles_split(sim),
            timeout_s=120,
            what="west's hot bundles split",
            process=second,
        )
        seen = second.batches()
        wait_for(
            lambda: second.batches() >= seen + 2,
            timeout_s=60,
            what="two more micro-batches",
            process=second,
        )
        assert second.stop() == 0, second.text()[-3000:]
    finally:
        for p in processes:
            if p.alive():
                p.kill()
        sim.stop()
    assert "no record for" not in second.text()  # no read task waited for its records
    # The checkpoint no longer names the vanished partitions; both new ones are read.
    assert set(committed_offsets(checkpoint)) == {"0", "1"}
    log = (tmp_path / "balancer.log").read_text()
    assert "partition(s) [2, 3]" in log, log[-3000:]
    parents = [s.parent for s in sim.model.splits if s.namespace == HOT]
    assert sorted(parents) == sorted(hot), parents  # each split once, across the restart
