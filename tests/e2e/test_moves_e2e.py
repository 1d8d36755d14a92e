"""Moving bundles with the real `pulsar-balancer run` process: a restarted broker owns nothing
(conf/scenarios/broker-restart.yaml) and `run` gives it bundles; dry-run sends no unload; a
SIGKILL right after a move went out, then a restart on the same state, sends no move twice.

Kept short (two Spark starts in all): the CI budget is shared with every other e2e test.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from balancer.sim import PeerGroup, RunningPeerGroup, load_scenario
from tests.e2e import harness
from tests.e2e.harness import (
    SECRET_TOKEN,
    BalancerProcess,
    audit_records,
    wait_for,
)
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

RESTART = Path("conf/scenarios/broker-restart.yaml")
CLUSTER = "standalone"
IDLE = 2  # the restarted broker's index
TIME_SCALE = 10.0  # 1 real second = 10 simulated seconds
# Simulated seconds from an unload to the clients' lookup that places the bundle: long
# enough that the process is killed while its first move is still unsettled.
RECONNECT_DELAY_S = 40.0


def start_sim() -> RunningPeerGroup:
    scenario = load_scenario(RESTART)
    (cluster,) = scenario.clusters
    # Brokers keep their plain port (their id) beside a TLS one, and `run` is given the
    # https admin URL: each broker is reached at its webServiceUrlTls (issue 41, point 2).
    cluster = cluster.model_copy(
        update={"reconnect_delay_s": RECONNECT_DELAY_S, "tls_web_port": True}
    )
    scenario = scenario.model_copy(update={"clusters": [cluster]})
    group = PeerGroup(scenario, time_scale=TIME_SCALE)
    return group.start(required_token=SECRET_TOKEN)


def write_config(tmp: Path, sim: RunningPeerGroup, kafka: Broker, mode: str) -> Path:
    return harness.write_config(
        tmp,
        sim=sim,
        bootstrap_servers=kafka.bootstrap_servers,
        mode=mode,
        clusters=(CLUSTER,),
        controller={"writer_lease": {"enabled": False}},
        offload=None,
    )


def idle_owns(sim: RunningPeerGroup) -> int:
    """Bundles the restarted broker owns now."""
    with sim.model.lock:
        return len(sim.model.brokers.owned(CLUSTER, IDLE))


def journal_moves(tmp: Path) -> list[tuple[str, str, str | None]]:
    """(decision id, action key, result) of every move in the journal."""
    with sqlite3.connect(tmp / "journal.sqlite3") as db:
        rows = db.execute(
            "SELECT decision_id, action_key, result FROM actions WHERE kind = 'move'"
        ).fetchall()
    return [(str(d), str(k), r) for d, k, r in rows]


def move_records(tmp: Path) -> list[tuple[str, str]]:
    """(decision id, result) of each audit record of a move: a decision's own outcome names
    its `decision`, a recheck (after an `unknown` or a restart) its `intent`'s."""
    out = []
    for record in audit_records(tmp):
        decision = record.get("decision") or record.get("intent", {}).get("decision", {})
        if decision.get("kind") == "move":
            out.append((str(decision["decision_id"]), str(record["result"])))
    return out


def test_apply_balances_a_restarted_broker_across_a_sigkill(kafka: Broker, tmp_path: Path) -> None:
    """The first run is killed right after its first unload reached the simulator (its
    outcome not yet known); the second, on the same journal and checkpoints, settles it from
    ownership and finishes the job: one unload per move decision, none applied twice."""
    sim = start_sim()
    try:
        assert idle_owns(sim) == 0
        config = write_config(tmp_path, sim, kafka, "apply")
        first = BalancerProcess(config, tmp_path, tmp_path / "summary-1.json").start()
        try:
            wait_for(
                lambda: bool(sim.model.brokers.moves),
                timeout_s=240,
                what="the first move",
                process=first,
            )
        finally:
            first.kill()
        at_kill = journal_moves(tmp_path)
        assert at_kill, "the move was sent before its intent was journaled"
        assert any(r in (None, "unknown") for _, _, r in at_kill), at_kill

        second = BalancerProcess(config, tmp_path, tmp_path / "summary-2.json").start()
        try:

            def settled() -> bool:
                moves = journal_moves(tmp_path)
                return (
                    idle_owns(sim) > 0
                    and bool(moves)
                    and all(r not in (None, "unknown") for _, _, r in moves)
                )

            wait_for(settled, timeout_s=240, what="every move settled", process=second)
            # A few more micro-batches: an over-eager balancer would move bundles again.
            seen = second.batches()
            wait_for(
                lambda: second.batches() >= seen + 3,
                timeout_s=120,
                what="three more micro-batches",
                process=second,
            )
        finally:
            assert second.stop() == 0, second.text()[-3000:]

        all_moves = journal_moves(tmp_path)
        # An intent the kill caught before its unload was sent is settled `abandoned` from
        # ownership (the bundle never left its source): nothing was sent for it.
        moves = [m for m in all_moves if m[2] != "abandoned"]
        sent = sim.model.brokers.moves
        # One unload per move decision that was sent: nothing re-sent across the kill.
        assert len(sent) == len(moves), (sent, all_moves)
        keys = [k for _, k, _ in all_moves]
        assert len(keys) == len(set(keys))
        bundles = [f"{m.namespace}/{m.bundle}" for m in sent]
        assert len(bundles) == len(set(bundles)), "a bundle moved twice within its grace"
        assert {m.destination for m in sent} == {IDLE}
        assert {r for _, _, r in moves} == {"applied"}, all_moves
        assert all(m.outcome == "landed" for m in sent)
        # The audit log shows the moves applied (the one the kill left open: rechecked).
        applied = [d for d, result in move_records(tmp_path) if result == "applied"]
        assert sorted(applied) == sorted(d for d, _, _ in moves)
    finally:
        sim.stop()


def test_dry_run_moves_nothing(kafka: Broker, tmp_path: Path) -> None:
    sim = start_sim()
    try:
        config = write_config(tmp_path, sim, kafka, "dry-run")
        process = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
        try:
            wait_for(
                lambda: any(result == "dry_run" for _, result in move_records(tmp_path)),
                timeout_s=240,
                what="a dry-run move",
                process=process,
            )
        finally:
            assert process.stop() == 0, process.text()[-3000:]
        assert sim.model.brokers.moves == []
        assert sim.model.requests(route="unload") == 0
        assert idle_owns(sim) == 0
        assert process.read_summary()["mode"] == "dry-run"
    finally:
        sim.stop()
