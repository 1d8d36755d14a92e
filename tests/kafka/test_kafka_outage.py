"""A Kafka outage longer than the source's timeout ends `pulsar-balancer run` cleanly.

The documented behaviour (docs/operations.md, "Kafka outages"): the stream ends, /healthz
fails from then on, every Kafka client closes within its timeout, and the process exits 1
with the cause in `stream_error`; on Kubernetes the pod restarts from its checkpoint.
The real process, a real tansu broker stopped for good, real Spark.
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

from balancer.kafka.embedded import EmbeddedKafka
from balancer.sim import RunningPeerGroup, start_peer_group
from tests.e2e.harness import SCENARIO, BalancerProcess, wait_for, write_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

# kafka-python's producers give up on a record after delivery_timeout_ms (120 s): before
# every close was bounded, shutdown waited that long. The bound of this test is well below.
EXIT_WITHIN_S = 75.0


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(SCENARIO, seed=5) as group:
        yield group


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_kafka_outage_ends_the_run_with_exit_1_a_failing_healthz_and_the_cause(
    sim: RunningPeerGroup, tmp_path: Path
) -> None:
    broker = EmbeddedKafka.start()
    config = write_config(
        tmp_path, sim=sim, bootstrap_servers=broker.bootstrap_servers, mode="dry-run"
    )
    run = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
    try:
        wait_for(lambda: run.batches() >= 2, timeout_s=240, what="two batches", process=run)
        found = re.search(r"metrics: (http://\S+)/metrics", run.text())
        assert found is not None
        url = found.group(1)
        ready_checks = {
            "stream_running",
            "last_batch_recent",
            "kafka_reachable",
            "cluster_reachable",
            "collector_publishing",
            "controller_ok",
            "cluster_read:east",
            "cluster_read:west",
            "events_on_time",
        }

        def ready() -> bool:
            checks = _get(f"{url}/readyz")[1]["checks"]
            assert isinstance(checks, dict) and set(checks) == ready_checks, checks
            return all(checks.values())

        wait_for(ready, timeout_s=120, what="every readiness check passing", process=run)
        assert _get(f"{url}/healthz") == (
            200,
            {
                "checks": {"collector_alive": True, "stream_alive": True},
                "failing": [],
                "status": "alive",
            },
        )

        broker.stop()  # for good: longer than any timeout of the source
        stopped_at = time.monotonic()
        unhealthy: list[dict[str, object]] = []
        while run.alive() and time.monotonic() - stopped_at < EXIT_WITHIN_S:
            try:
                status, body = _get(f"{url}/healthz")
            except OSError:  # the endpoint is gone: the process is on its way out
                status, body = 0, {}
            if status == 503:
                unhealthy.append(body)
            time.sleep(0.05)  # the window closes once shutdown is done: a few seconds
        assert not run.alive(), f"still running {EXIT_WITHIN_S} s after Kafka went away"
        assert run.process is not None and run.process.returncode == 1
        assert unhealthy, "/healthz never failed while the stream was dead"
        assert unhealthy[0]["failing"] == ["stream_alive"]

        error = run.read_summary()["stream_error"]
        assert isinstance(error, str) and "\n" not in error
        assert "Traceback" not in error
        # The cause, not Spark's wrapper: the Kafka client's own error class and message.
        assert re.match(
            r"^(KafkaTimeoutError|TimeoutError|NoBrokersAvailable|"
            r"KafkaConnectionError): \S",
            error,
        ), error
    finally:
        if run.alive():
            run.kill()
        broker.stop()
