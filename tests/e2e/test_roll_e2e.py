"""A roll against the real `run` process (issue 43, point 4): `roll start` pauses Pulsar's
shedder and auto-split on the simulator and records the restart order; the running balancer
reads it from Kafka (no restart) and drains the marked broker to the broker that restarts
last, falling back (named in its log) only when that one has no room; `roll finish` restores
the switches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import SECRET_TOKEN, TOKEN_ENV, BalancerProcess, wait_for
from tests.e2e.test_drain_e2e import (
    CLUSTER,
    DRAINED,
    drain,
    start_sim,
    user_bundles_on,
    write_config,
)
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

SHED, SPLIT = "loadBalancerSheddingEnabled", "loadBalancerAutoBundleSplitEnabled"
LAST = 0  # restarts last in the order given (a loaded broker: broker 2 starts idle)


def roll(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("pulsar-balancer")
    return subprocess.run(
        [str(exe), "roll", *args, "--config", str(config), "--cluster", CLUSTER],
        env={**os.environ, TOKEN_ENV: SECRET_TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_drains_by_the_rolls_order_and_finish_restores_the_switches(
    kafka: Broker, tmp_path: Path
) -> None:
    sim = start_sim()
    try:
        c = sim.model.clusters[CLUSTER]
        ids = [c.broker_address(i) for i in range(3)]
        config = write_config(tmp_path, sim, kafka)
        switches = sim.model.brokers.runtime_configuration
        process = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
        try:
            wait_for(lambda: process.batches() >= 3, timeout_s=240, what="three micro-batches",
                     process=process)  # fmt: skip
            order = ",".join(ids[i] for i in (DRAINED, 2, LAST))
            started = roll(config, "start", "--order", order)
            assert started.returncode == 0, started.stdout + started.stderr
            assert (switches(CLUSTER)[SHED], switches(CLUSTER)[SPLIT]) == ("false", "false")
            sent_before = len(sim.model.brokers.moves)
            result = drain(config, "--wait", "--timeout-s", "400", "--interval-s", "2",
                           ids[DRAINED])  # fmt: skip
            assert result.returncode == 0, result.stdout + result.stderr
            assert not user_bundles_on(sim, DRAINED)
            finished = roll(config, "finish")
            assert finished.returncode == 0, finished.stdout + finished.stderr
            assert (switches(CLUSTER)[SHED], switches(CLUSTER)[SPLIT]) == ("true", "true")
        finally:
            assert process.stop() == 0, process.text()[-3000:]
        drained = [m for m in sim.model.brokers.moves[sent_before:] if m.source == DRAINED]
        assert drained, "the drain moved nothing"
        assert all(m.outcome == "landed" for m in drained), drained
        log = process.text()
        for move in drained:  # to the last to restart, else a fallback the log names
            if move.destination != LAST:
                assert f"{move.namespace}/{move.bundle} -> {ids[move.destination]}" in log, move
        assert any(m.destination == LAST for m in drained)
    finally:
        sim.stop()
