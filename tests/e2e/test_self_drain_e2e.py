"""`pulsar-balancer drain --wait` with the balancer down (issue 43, point 3; its Done-when):
no `run` process holds the writer lease, so the command takes the lease and drains the
broker of the simulator by itself, through the controller's rules, while the simulator's
traffic flows; it returns 0 once the broker owns nothing but its system namespaces, each
move landing where it was sent, none twice and none onto the draining broker. Its journal
(controller.journal_path) names the command's moves (writer `drain@...`)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e import harness
from tests.e2e.test_drain_e2e import CLUSTER, DRAINED, drain, start_sim, user_bundles_on
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]


def test_drain_wait_with_the_balancer_down_drains_by_itself(kafka: Broker, tmp_path: Path) -> None:
    sim = start_sim()
    try:
        broker_id = sim.model.clusters[CLUSTER].broker_address(DRAINED)
        before = user_bundles_on(sim, DRAINED)
        assert before, "the scenario gives the broker bundles"
        name = f"lease-{uuid.uuid4().hex[:8]}"
        lease = {"group": name, "topic": name, "lease_s": 10, "safety_margin_s": 2}
        path = harness.write_config(
            tmp_path,
            sim=sim,
            bootstrap_servers=kafka.bootstrap_servers,
            mode="apply",
            clusters=(CLUSTER,),
            controller={"writer_lease": lease},
            offload=None,
        )
        config = yaml.safe_load(path.read_text())
        config["kafka"]["drain_marks_topic"] = f"marks-{uuid.uuid4().hex[:8]}"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        # No `run` process: the balancer is down.
        result = drain(path, "--wait", "--timeout-s", "300", "--interval-s", "2", broker_id)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "balancer down" in result.stderr and "drains by itself" in result.stderr
        assert not user_bundles_on(sim, DRAINED)
        sent = sim.model.brokers.moves
        assert sent, "no move was made"
        assert all(m.outcome == "landed" for m in sent), sent
        assert all(m.destination != DRAINED for m in sent), sent
        bundles = [f"{m.namespace}/{m.bundle}" for m in sent]
        assert len(bundles) == len(set(bundles)), "a bundle moved twice"
        assert set(bundles) == before
        with sqlite3.connect(tmp_path / "journal.sqlite3") as journal:
            writers = {w for (w,) in journal.execute("SELECT writer FROM actions")}
        assert writers and all(w.startswith("drain@") for w in writers), writers
    finally:
        sim.stop()
