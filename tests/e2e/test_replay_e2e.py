"""Trust: a replay of what `run` recorded reproduces `run`'s own decisions exactly.

`pulsar-balancer run` (the real process, real Spark and Kafka) balances the simulated
two-cluster peer group of scenario.yaml (the hot namespace on west, the archive on east)
and records as it goes: the stats topic and the context topic (each round's load reports).
`replay --from-kafka` of that recording, policy `ours`, must make the same splits (same
bundles, same boundaries), the same moves (bundle, source, destination) and the same
offloads as `run` applied, which the simulator and `run`'s summary hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.kafka.topics import ensure_topics
from balancer.sim import PeerGroup, RunningPeerGroup
from tests.e2e.harness import (
    SCENARIO,
    SECRET_TOKEN,
    BalancerProcess,
    wait_for,
    write_config,
)
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

HOT = "e2e/hot"
TIME_SCALE = 10.0


@dataclass
class Recorded:
    sim: RunningPeerGroup
    tmp: Path
    config: Path


def _with_context_topic(path: Path, topic: str) -> None:
    data = yaml.safe_load(path.read_text())
    data["kafka"]["context_topic"] = f"{topic}-context"
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def recorded(kafka: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """One apply-mode run until the hot bundles are split and a few windows more."""
    tmp = tmp_path_factory.mktemp("e2e-replay")
    sim = PeerGroup.from_scenario(SCENARIO, time_scale=TIME_SCALE).start(
        required_token=SECRET_TOKEN
    )
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka.bootstrap_servers, {topic: 4, f"{topic}-dlq": 1})
        config = write_config(
            tmp, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply",
            stats_topic=topic,
        )  # fmt: skip
        _with_context_topic(config, topic)
        process = BalancerProcess(config, tmp, tmp / "summary.json").start()
        try:
            wait_for(
                lambda: len({s.parent for s in sim.model.splits if s.namespace == HOT}) >= 2,
                timeout_s=400, what="the hot bundles' splits", process=process,
            )  # fmt: skip
            wait_for(
                lambda: "(offload status SUCCESS)" in process.text(),
                timeout_s=300, what="the archive's offload followed", process=process,
            )  # fmt: skip
            seen = process.batches()
            wait_for(
                lambda: process.batches() >= seen + 2,
                timeout_s=120, what="two more micro-batches", process=process,
            )  # fmt: skip
        finally:
            code = process.stop()
        assert code == 0, process.text()[-3000:]
        yield Recorded(sim, tmp, config)
    finally:
        sim.stop()


def _replay(recorded: Recorded, tmp_path: Path) -> dict[str, Any]:
    """`pulsar-balancer replay --from-kafka` as an operator runs it, its JSON report."""
    exe = Path(sys.executable).with_name("pulsar-balancer")
    done = subprocess.run(
        [str(exe), "replay", "--from-kafka", "--config", str(recorded.config),
         "--policies", "ours", "--output", "json", "--work-dir", str(tmp_path / "work"),
         # ~10 rounds a batch, as run read them here: one Spark batch per 2 s round
         # would take ~4 s each on this machine
         "--rounds-per-batch", "10"],
        capture_output=True, timeout=1500, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def _ours(document: dict[str, Any]) -> dict[str, Any]:
    runs = document["result"]["runs"]
    (ours,) = [r for r in runs if r["policy"] == "ours"]
    return dict(ours)


@pytest.mark.timeout(2700)  # run until its splits and offload, then the replay: loaded machine
def test_replay_of_a_run_reproduces_its_splits_moves_and_offloads(
    recorded: Recorded, tmp_path: Path
) -> None:
    ours = _ours(_replay(recorded, tmp_path))
    actions = ours["actions"]
    # Splits: the simulator's record of what Pulsar did, bundle and boundaries.
    run_splits = sorted(
        (f"{s.namespace}/{s.parent}", tuple(str(c) for c in s.children))
        for s in recorded.sim.model.splits
    )
    replay_splits = sorted(
        (a["subject"], tuple(a["children"])) for a in actions if a["kind"] == "split"
    )
    assert run_splits and replay_splits == run_splits
    # Moves and offloads: what run applied (its summary; a move settled by a later recheck
    # is there too, with where it landed).
    summary = json.loads((recorded.tmp / "summary.json").read_text())
    run_moves = sorted(
        (f"{m['namespace']}/{m['bundle']}", m["source"], m["destination"]) for m in summary["moves"]
    )
    replay_moves = sorted(
        (a["subject"], a["source_broker"], a["destination_broker"])
        for a in actions
        if a["kind"] == "move"
    )
    assert replay_moves == run_moves
    run_offloads = sorted(o["topic"] for o in summary["offloads"])
    replay_offloads = sorted(a["subject"] for a in actions if a["kind"] == "offload")
    assert run_offloads and replay_offloads == run_offloads
    # A peer group: both clusters are in the recording and replayed.
    assert {"east", "west"} <= _clusters(ours, actions)


def _clusters(ours: dict[str, Any], actions: list[dict[str, Any]]) -> set[str]:
    brokers = {k.split("/", 1)[0] for w in ours["windows"] for k in w["broker_load"]}
    return brokers | {a["cluster"] for a in actions}


RESTART = Path("conf/scenarios/broker-restart.yaml")


@pytest.mark.timeout(2700)
def test_replay_of_a_run_reproduces_its_moves(
    kafka: Broker, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A restarted broker owns nothing (broker-restart.yaml) and `run` moves bundles to it;
    the replay moves the same bundles from the same sources to the same destination."""
    from balancer.sim import load_scenario
    from tests.e2e import harness

    tmp = tmp_path_factory.mktemp("e2e-replay-moves")
    scenario = load_scenario(RESTART)
    sim = PeerGroup(scenario, time_scale=TIME_SCALE).start(required_token=SECRET_TOKEN)
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka.bootstrap_servers, {topic: 4, f"{topic}-dlq": 1})
        config = harness.write_config(
            tmp, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply",
            stats_topic=topic, clusters=(scenario.clusters[0].name,),
            controller={"writer_lease": {"enabled": False}}, offload=None,
        )  # fmt: skip
        _with_context_topic(config, topic)
        process = BalancerProcess(config, tmp, tmp / "summary.json").start()
        try:
            wait_for(
                lambda: len(sim.model.brokers.moves) >= 2,
                timeout_s=400, what="moves to the restarted broker", process=process,
            )  # fmt: skip
            seen = process.batches()
            wait_for(
                lambda: process.batches() >= seen + 3,
                timeout_s=180, what="three more micro-batches", process=process,
            )  # fmt: skip
        finally:
            assert process.stop() == 0, process.text()[-3000:]
        recorded = Recorded(sim, tmp, config)
        actions = _ours(_replay(recorded, tmp))["actions"]
        summary = json.loads((tmp / "summary.json").read_text())
        run_moves = [
            (f"{m['namespace']}/{m['bundle']}", m["source"], m["destination"])
            for m in summary["moves"]
        ]
        replay_moves = [
            (a["subject"], a["source_broker"], a["destination_broker"])
            for a in actions
            if a["kind"] == "move"
        ]
        assert run_moves and sorted(replay_moves) == sorted(run_moves)
        run_splits = sorted(f"{s.namespace}/{s.parent}" for s in sim.model.splits)
        assert sorted(a["subject"] for a in actions if a["kind"] == "split") == run_splits
    finally:
        sim.stop()
