"""The stats topic recreated with fewer partitions while the balancer is down (issue 32).

The real `pulsar-balancer run --config` process against the two-cluster simulator and the
session's Kafka-protocol broker. After a few micro-batches the balancer is stopped, the stats
topic is recreated with 2 partitions instead of 4, and the balancer started again on the same
checkpoint. The checkpoint's last batch is left uncommitted, as a crash between planning and
committing leaves it, and its plan names partitions 2 and 3 (the test writes them into it:
waiting for a run to stop right after a batch that read them failed on a loaded machine,
issue 42). The restart replays that batch, whose partitions 2 and 3 no longer exist. That
replay once waited for them until the read task timed out, and every restart did the same
(a crash loop that only moving the checkpoint aside ended).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from balancer.kafka.topics import ensure_topics
from tests.e2e.harness import (
    E2E_CONTROLLER,
    BalancerProcess,
    committed_offsets,
    wait_for,
    write_config,
)
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
# Bounds, not speed checks, wide enough for a machine other jobs load (issue 42: with a load
# average of 15 the first batch of a run came 81 s after its start; alone, the whole test
# takes ~100 s). What each wait catches fails it sooner or still within them: a replayed
# read task that waits for a vanished partition fails its batch after 60 s
# (`read_timeout_s`) and the process exits 1, which ends the wait at once.
START_TIMEOUT_S = 180  # a balancer process up, its metrics served
BATCHES_TIMEOUT_S = 420  # its first micro-batches (Spark's start, the workers, planning)
RESUME_TIMEOUT_S = 300
SPLIT_TIMEOUT_S = 300


def _offset_file(checkpoint: Path, batch: int) -> Path:
    return checkpoint / "offsets" / str(batch)


def _offset_line(path: Path) -> dict[str, int]:
    offsets: dict[str, int] = json.loads(path.read_text().splitlines()[-1])
    return offsets


def _newest_batch(checkpoint: Path) -> int:
    """The newest batch the checkpoint planned (Spark replays it when it is not committed)."""
    batch = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert batch >= 1, "the first run planned fewer than two batches"
    return batch


def _plan_reads_of(checkpoint: Path, partitions: set[str]) -> None:
    """Make the newest planned batch read `partitions` and leave it uncommitted: what a crash
    between planning a batch that reads them and committing it leaves.

    Its planned end offsets of `partitions` are put past its start where they are not (the
    records are there or not: the topic is recreated before the replay), the plan's checksum
    file removed (Hadoop checks it on read), and its commit marker removed.
    """
    batch = _newest_batch(checkpoint)
    path = _offset_file(checkpoint, batch)
    start = _offset_line(_offset_file(checkpoint, batch - 1))
    end = _offset_line(path)
    for p in partitions:
        end[p] = max(end.get(p, 0), start.get(p, 0) + 1)
    lines = path.read_text().splitlines()
    lines[-1] = json.dumps(end, separators=(",", ":"))
    path.write_text("\n".join(lines))
    (checkpoint / "offsets" / f".{batch}.crc").unlink(missing_ok=True)
    (checkpoint / "commits" / str(batch)).unlink(missing_ok=True)
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)
    # What the restart replays: a range of each of `partitions` (and what the run had read).
    assert all(_offset_line(path)[p] > start.get(p, 0) for p in partitions)


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


@pytest.mark.timeout(1800)  # the sum of the bounds above, on a loaded machine
def test_a_stats_topic_recreated_with_fewer_partitions_resumes_the_stream(
    kafka: Broker, tmp_path: Path
) -> None:
    sim = start_sim()
    processes: list[BalancerProcess] = []
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka.bootstrap_servers, {topic: STATS_PARTITIONS, f"{topic}-dlq": 1})
        # No writer lease: this test is about the stream, and a lease member that an earlier
        # e2e test SIGKILLed on the session's broker (same clusters, same group) kept both
        # runs standby for 5 minutes in one CI run (test_writer_lease_e2e covers the lease).
        config = write_config(
            tmp_path, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply",
            stats_topic=topic,
            controller={**E2E_CONTROLLER, "writer_lease": {"enabled": False}},
        )  # fmt: skip
        checkpoint = tmp_path / "checkpoints"

        def start(n: int) -> BalancerProcess:
            process = BalancerProcess(config, tmp_path, tmp_path / f"summary-{n}.json").start()
            processes.append(process)
            return process

        gone = {str(p) for p in range(NEW_PARTITIONS, STATS_PARTITIONS)}
        first = start(0)
        # Two batches: the second's plan is the one rewritten, its start the first's end.
        wait_for(lambda: first.batches() >= 2, timeout_s=BATCHES_TIMEOUT_S,
                 what="two micro-batches", process=first)  # fmt: skip
        assert first.stop() == 0, first.text()[-3000:]
        # The replayed batch must read from the partitions that will no longer exist: the
        # test plans it so, rather than waiting for a run to stop right after such a batch
        # (a batch that only moves the watermark reads nothing).
        _plan_reads_of(checkpoint, gone)

        _recreate(kafka.bootstrap_servers, topic, NEW_PARTITIONS)
        second = start(1)
        wait_for(
            lambda: "metrics: http://" in second.text(),
            timeout_s=START_TIMEOUT_S,
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
            timeout_s=SPLIT_TIMEOUT_S,
            what="west's hot bundles split",
            process=second,
        )
        seen = second.batches()
        wait_for(
            lambda: second.batches() >= seen + 2,
            timeout_s=BATCHES_TIMEOUT_S,
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
