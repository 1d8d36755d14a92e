"""Issue 32, whole process: no cluster or broker may silently drop out of balancing.

The real `pulsar-balancer run --config` process against the two-cluster simulator (hot
namespace on west, tokens required), as the second fault campaign ran it:
1. west is down when the balancer starts and comes back: every west broker is polled and
   west's hot bundles are split (the broker list was read once, at start; broker 1 got 0
   polls and the hot bundle was never split);
2. east stops accepting the token: the cluster is unauthorized in the metrics, /readyz
   names it, the failures are counted by reason, and west is still split;
3. east is blackholed (every answer takes minutes): west's brokers are still polled every
   round, west is split, and shutdown does not wait for east.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from balancer.sim import RunningPeerGroup
from tests.e2e.harness import SECRET_TOKEN, BalancerProcess, wait_for, write_config
from tests.e2e.test_run_e2e import hot_bundles_split, start_sim
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

BROKER_STATS = "broker_stats"  # the simulator's route name for broker-stats/topics


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    group = start_sim()
    try:
        yield group
    finally:
        group.faults.clear()  # a blackholed request must not hold the servers' shutdown
        group.stop()


def _endpoint(process: BalancerProcess) -> str:
    found = re.search(r"metrics: (http://127\.0\.0\.1:\d+)/metrics", process.text())
    assert found, process.text()[-2000:]
    return found.group(1)


def _sample(process: BalancerProcess, name: str, **labels: str) -> float | None:
    """One sample of the balancer's /metrics (summed over the labels not given)."""
    with urllib.request.urlopen(f"{_endpoint(process)}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


def _readyz(process: BalancerProcess) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"{_endpoint(process)}/readyz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _failing(process: BalancerProcess) -> list[str]:
    return list(_readyz(process)[1]["failing"])  # type: ignore[call-overload]


def _start(tmp_path: Path, sim: RunningPeerGroup, kafka: Broker) -> BalancerProcess:
    config = write_config(
        tmp_path, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply"
    )
    process = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
    try:
        wait_for(
            lambda: "metrics: http://" in process.text(),
            timeout_s=120,
            what="the metrics endpoint",
            process=process,
        )
    except BaseException:  # a start that never comes up must not outlive the test
        process.kill()
        raise
    return process


def test_a_cluster_down_at_start_is_polled_broker_by_broker_once_it_is_back(
    tmp_path: Path, sim: RunningPeerGroup, kafka: Broker
) -> None:
    sim.stop_cluster("west")
    process = _start(tmp_path, sim, kafka)
    try:
        # Not read for 3 intervals (6 s): named on /readyz.
        wait_for(
            lambda: "cluster_read:west" in _failing(process),
            timeout_s=120,
            what="/readyz naming west",
            process=process,
        )
        assert "cluster_read:east" not in _failing(process)
        before = sim.model.broker_requests("west", BROKER_STATS)
        sim.start_cluster("west")
        wait_for(
            lambda: all(
                n > before[b] for b, n in sim.model.broker_requests("west", BROKER_STATS).items()
            ),
            timeout_s=60,
            what="every west broker polled",
            process=process,
        )
        wait_for(lambda: hot_bundles_split(sim), timeout_s=300, what="west split", process=process)
        wait_for(
            lambda: "cluster_read:west" not in _failing(process),
            timeout_s=60,
            what="/readyz no longer naming west",
            process=process,
        )
        assert (
            _sample(
                process,
                "pulsar_balancer_collector_poll_failures_total",
                cluster="west",
                reason="unreachable",
            )
            or 0
        ) > 0
        assert process.stop() == 0, process.text()[-3000:]
    finally:
        if process.alive():
            process.kill()


def test_an_unauthorized_cluster_is_reported_and_the_other_is_still_split(
    tmp_path: Path, sim: RunningPeerGroup, kafka: Broker
) -> None:
    process = _start(tmp_path, sim, kafka)
    try:
        wait_for(lambda: process.batches() >= 1, timeout_s=240, what="a batch", process=process)
        sim.rotate_token("a-token-the-balancer-does-not-have", cluster="east")
        wait_for(
            lambda: _sample(process, "pulsar_balancer_cluster_unauthorized", cluster="east") == 1,
            timeout_s=60,
            what="east unauthorized",
            process=process,
        )
        assert _sample(process, "pulsar_balancer_cluster_unauthorized", cluster="west") == 0
        wait_for(
            lambda: "cluster_read:east" in _failing(process),
            timeout_s=60,
            what="/readyz naming east",
            process=process,
        )
        assert _sample(process, "pulsar_balancer_cluster_reachable", cluster="east") == 0
        refused = _sample(
            process,
            "pulsar_balancer_collector_poll_failures_total",
            cluster="east",
            reason="unauthorized",
        )
        assert refused is not None and refused > 0
        wait_for(lambda: hot_bundles_split(sim), timeout_s=300, what="west split", process=process)
        # The token is fixed on the cluster's side: read again, no restart.
        sim.rotate_token(SECRET_TOKEN, cluster="east")
        wait_for(
            lambda: (
                _sample(process, "pulsar_balancer_cluster_unauthorized", cluster="east") == 0
                and "cluster_read:east" not in _failing(process)
            ),
            timeout_s=60,
            what="east read again",
            process=process,
        )
        assert process.stop() == 0, process.text()[-3000:]
    finally:
        if process.alive():
            process.kill()
    assert SECRET_TOKEN not in process.text()


def test_a_blackholed_cluster_delays_only_itself(
    tmp_path: Path, sim: RunningPeerGroup, kafka: Broker
) -> None:
    # Every answer of east's brokers takes 10 minutes: longer than the run.
    sim.faults.configure(latency_s=600.0, only_clusters=("east",))
    process = _start(tmp_path, sim, kafka)
    try:
        wait_for(lambda: hot_bundles_split(sim), timeout_s=300, what="west split", process=process)
        # West is polled every round (2 s) although east never answers: at least half the
        # rounds of 20 s (polled one after another, it got 0.8 polls a minute).
        before = sim.model.broker_requests("west", BROKER_STATS)
        time.sleep(20)
        after = sim.model.broker_requests("west", BROKER_STATS)
        assert all(after[b] - before[b] >= 5 for b in after), (before, after)
        timeouts = _sample(
            process,
            "pulsar_balancer_collector_poll_failures_total",
            cluster="east",
            reason="timeout",
        )
        assert timeouts is not None and timeouts > 0
        assert "cluster_read:east" in _failing(process)
        # Shutdown is bounded whatever east does (a request to it would take 10 minutes).
        stopping = time.monotonic()
        assert process.stop(timeout_s=120) == 0, process.text()[-3000:]
        print(f"shutdown took {time.monotonic() - stopping:.1f} s with east blackholed")
    finally:
        if process.alive():
            process.kill()
