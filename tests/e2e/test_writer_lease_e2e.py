"""Two balancers on one peer group (issue 32, item 7): only the writer lease's holder acts.

Two real `pulsar-balancer run --config` processes, each with its own state directory and
stats topic, share the Kafka broker of this test and the simulated peer group; they meet in
the lease group derived from the cluster names. Their deny-lists split the work: the first
may only split e2e/hot (and needs more windows to decide a split), the second may only
offload e2e/archive, so every action shows who sent it.

The first balancer takes the lease and is paused (SIGSTOP of its process: the one that holds
the lease and calls Pulsar) before it decided anything; the second takes the lease over and
offloads. Resumed after losing the lease, the first decides the splits and sends nothing
(`no_lease`): nobody splits. Then the second is killed (SIGKILL), and the first takes over
and splits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.kafka.embedded import EmbeddedKafka
from balancer.sim import RunningPeerGroup
from tests.e2e.harness import BalancerProcess, audit_records, wait_for, write_config
from tests.e2e.test_faults_e2e import _metric
from tests.e2e.test_run_e2e import (
    HOT,
    hot_bundles_at_start,
    hot_bundles_split,
    metrics_target,
    start_sim,
)

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

ARCHIVE_NS = "e2e/archive"
LEASE = {"lease_s": 10, "safety_margin_s": 2}  # short: takeovers within the test's minutes


def lease_config(
    tmp: Path, sim: RunningPeerGroup, bootstrap: str, *, deny: str, hit_count: int
) -> Path:
    tmp.mkdir()
    path = write_config(tmp, sim=sim, bootstrap_servers=bootstrap, mode="apply")
    config = yaml.safe_load(path.read_text())
    config["controller"].update(writer_lease=LEASE, deny_namespaces=[deny])
    config["detection"]["hit_count_threshold"] = hit_count
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def identity(process: BalancerProcess) -> str:
    assert process.process is not None
    return f"{socket.gethostname()}:{process.process.pid}"


def writer_lease(process: BalancerProcess) -> dict[str, Any]:
    """The `writer_lease` entry of the balancer's /readyz body ({} before it serves)."""
    try:
        url = f"http://{metrics_target(process)}/readyz"
        with urllib.request.urlopen(url, timeout=5) as answer:  # 200: a standby is ready
            body: dict[str, Any] = json.loads(answer.read())
    except (OSError, AssertionError):
        return {}
    return dict(body.get("writer_lease", {}))


def results(tmp: Path, kind: str | None = None) -> list[str]:
    return [
        r["result"]
        for r in audit_records(tmp)
        if "result" in r and (kind is None or r.get("decision", {}).get("kind") == kind)
    ]


def signal_balancer(process: BalancerProcess, sig: signal.Signals) -> None:
    """The balancer's own process (its Spark JVM runs on and waits for it)."""
    assert process.process is not None
    os.kill(process.process.pid, sig)


def test_one_balancer_acts_and_a_resumed_holder_sends_nothing(tmp_path: Path) -> None:
    broker = EmbeddedKafka.start(log_path=tmp_path / "tansu.log")
    sim = start_sim()
    processes: list[BalancerProcess] = []
    try:
        first_dir, second_dir = tmp_path / "first", tmp_path / "second"
        kafka = broker.bootstrap_servers
        first_config = lease_config(first_dir, sim, kafka, deny=ARCHIVE_NS, hit_count=8)
        second_config = lease_config(second_dir, sim, kafka, deny=HOT, hit_count=3)
        first = BalancerProcess(first_config, first_dir, first_dir / "summary.json").start()
        processes.append(first)
        wait_for(
            lambda: (
                _metric(first, "pulsar_balancer_writer_lease_held") == 1 and first.batches() >= 1
            ),
            timeout_s=180,
            what="the first balancer holding the lease, its stream running",
            process=first,
        )
        # Paused holding the lease, before it decided anything (8 windows to a split).
        signal_balancer(first, signal.SIGSTOP)
        assert not {"applied", "started"} & set(results(first_dir))
        second = BalancerProcess(second_config, second_dir, second_dir / "summary.json").start()
        processes.append(second)
        wait_for(
            lambda: "started" in results(second_dir, "offload"),
            timeout_s=240,
            what="the second balancer taking the lease over and offloading",
            process=second,
        )
        assert _metric(second, "pulsar_balancer_writer_lease_held") == 1
        assert writer_lease(second)["role"] == "holder"
        assert sim.model.splits == []

        signal_balancer(first, signal.SIGCONT)
        # Resumed: its lease expired during the pause. It decides the splits and must not
        # send them while the second balancer holds the lease.
        wait_for(
            lambda: "no_lease" in results(first_dir, "split"),
            timeout_s=240,
            what="the resumed balancer deciding a split without the lease",
            process=first,
        )
        wait_for(
            lambda: writer_lease(first).get("holder") == identity(second),
            timeout_s=60,
            what="the resumed balancer naming the holder",
            process=first,
        )
        standby = writer_lease(first)
        assert standby["role"] == "standby" and standby["held"] is False, standby
        assert _metric(first, "pulsar_balancer_writer_lease_held") == 0
        assert not {"applied", "started"} & set(results(first_dir))
        assert sim.model.splits == [] and sim.model.requests(route="split") == 0

        killed_at_ms = int(time.time() * 1000)
        second.kill()  # SIGKILL: no goodbye to the group; its session expires
        hot = set(hot_bundles_at_start())
        wait_for(
            lambda: hot_bundles_split(sim),
            timeout_s=240,
            what="the resumed balancer taking over and splitting",
            process=first,
        )
        assert writer_lease(first)["role"] == "holder"
        applied_at = [r["at_ms"] for r in audit_records(first_dir) if r.get("result") == "applied"]
        assert applied_at and min(applied_at) >= killed_at_ms  # nothing before the takeover
        assert sorted(s.parent for s in sim.model.splits) == sorted(hot)  # each split once
        assert first.stop() == 0, first.text()[-3000:]
    finally:
        for process in processes:
            if process.alive():
                signal_balancer(process, signal.SIGCONT)
                process.kill()
        sim.stop()
        broker.stop()
