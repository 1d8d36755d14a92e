"""`pulsar-balancer drain --wait` against the real `run` process (issue 43, points 2 and 3):
the operator marks a broker of the simulator while traffic flows; the running balancer reads
the mark from Kafka (no restart), moves every bundle off it at the drain pace, each move
landing where it was sent, none twice and none onto the draining broker; `--wait` returns 0
once the broker owns nothing but its system namespaces.

Needs the drain controller (MovePlanner's `draining_of`) and the drain marks wiring.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from balancer.core.moves.placement import is_system_namespace
from balancer.sim import PeerGroup, RunningPeerGroup, load_scenario
from tests.e2e import harness
from tests.e2e.harness import SECRET_TOKEN, TOKEN_ENV, BalancerProcess, wait_for
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

RESTART = Path("conf/scenarios/broker-restart.yaml")
CLUSTER = "standalone"
DRAINED = 1  # a broker carrying bundles (broker 2 starts idle)
TIME_SCALE = 10.0


def start_sim() -> RunningPeerGroup:
    return PeerGroup(load_scenario(RESTART), time_scale=TIME_SCALE).start(
        required_token=SECRET_TOKEN
    )


def write_config(tmp: Path, sim: RunningPeerGroup, kafka: Broker) -> Path:
    path = harness.write_config(
        tmp,
        sim=sim,
        bootstrap_servers=kafka.bootstrap_servers,
        mode="apply",
        clusters=(CLUSTER,),
        controller={"writer_lease": {"enabled": False}},
        offload=None,
    )
    config = yaml.safe_load(path.read_text())
    config["kafka"]["drain_marks_topic"] = f"marks-{uuid.uuid4().hex[:8]}"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def user_bundles_on(sim: RunningPeerGroup, broker: int) -> set[str]:
    with sim.model.lock:
        owned = sim.model.brokers.owned(CLUSTER, broker)
    return {f"{ns.name}/{b}" for ns, b in owned if not is_system_namespace(ns.name)}


def drain(config: Path, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("pulsar-balancer")
    return subprocess.run(
        [str(exe), "drain", "--config", str(config), "--cluster", CLUSTER, *args],
        env={**os.environ, TOKEN_ENV: SECRET_TOKEN},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_run_empties_a_broker_marked_by_drain_wait(kafka: Broker, tmp_path: Path) -> None:
    sim = start_sim()
    try:
        broker_id = sim.model.clusters[CLUSTER].broker_address(DRAINED)
        assert user_bundles_on(sim, DRAINED), "the scenario gives the broker bundles"
        config = write_config(tmp_path, sim, kafka)
        process = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
        try:
            wait_for(lambda: process.batches() >= 3, timeout_s=240, what="three micro-batches",
                     process=process)  # fmt: skip
            result = drain(config, "--wait", "--timeout-s", "400", "--interval-s", "2", broker_id)
            assert result.returncode == 0, result.stdout + result.stderr
            assert not user_bundles_on(sim, DRAINED)
            listed = drain(config, "--list", "-o", "json")
            assert broker_id in listed.stdout and '"draining"' in listed.stdout
        finally:
            assert process.stop() == 0, process.text()[-3000:]
        sent = sim.model.brokers.moves
        assert sent, "no move was made"
        assert all(m.outcome == "landed" for m in sent), sent
        assert all(m.destination != DRAINED for m in sent), sent
        bundles = [f"{m.namespace}/{m.bundle}" for m in sent]
        assert len(bundles) == len(set(bundles)), "a bundle moved twice"
    finally:
        sim.stop()
