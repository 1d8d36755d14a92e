"""An offload that ends in ERROR, end to end (issue 33): e2e/archive has no offloader, so
Pulsar answers the trigger 204 (`PersistentTopic.triggerOffload` only starts it) and the
status turns ERROR with lastError "NullLedgerOffloader" (`ManagedLedgerImpl.asyncOffloadPrefix`
with the NullLedgerOffloader). The run records it `started`, follows the status, and reports
it `failed` with Pulsar's reason in the audit log and the metrics; the summary counts no
offloaded bytes.
"""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from balancer.kafka.topics import ensure_topics
from balancer.sim import PeerGroup, parse_scenario
from balancer.sim.storage import NO_OFFLOADER_ERROR
from tests.e2e.harness import (
    SCENARIO,
    SECRET_TOKEN,
    BalancerProcess,
    audit_records,
    wait_for,
    write_config,
)
from tests.e2e.test_run_e2e import ARCHIVE_TOPIC, STATS_PARTITIONS, TIME_SCALE, metrics_target
from tests.kafka_broker import Broker

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]


def _failed_offloads(tmp: Path) -> list[dict[str, object]]:
    return [
        r
        for r in audit_records(tmp)
        if r.get("followed") and r.get("kind") == "offload" and r.get("result") == "failed"
    ]


def test_an_offload_that_ends_in_error_is_reported_failed_with_its_reason(
    kafka: Broker, tmp_path: Path
) -> None:
    doc = yaml.safe_load(SCENARIO.read_text())
    for ns in doc["namespaces"]:
        if ns["name"] == "e2e/archive":
            ns["offloader"] = False  # no tiered storage for this namespace
    sim = PeerGroup(parse_scenario(doc), time_scale=TIME_SCALE).start(required_token=SECRET_TOKEN)
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka.bootstrap_servers, {topic: STATS_PARTITIONS, f"{topic}-dlq": 1})
        config = write_config(
            tmp_path, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply",
            stats_topic=topic,
        )  # fmt: skip
        process = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
        try:
            wait_for(
                lambda: bool(_failed_offloads(tmp_path)),
                timeout_s=300,
                what="an offload followed to ERROR",
                process=process,
            )
            with urllib.request.urlopen(
                f"http://{metrics_target(process)}/metrics", timeout=10
            ) as answer:
                metrics = answer.read().decode()
        finally:
            code = process.stop()
        assert code == 0, process.text()[-3000:]
        failed = _failed_offloads(tmp_path)[0]
        assert NO_OFFLOADER_ERROR in str(failed["detail"]), failed
        assert "offload status ERROR" in str(failed["detail"])
        started = [
            r
            for r in audit_records(tmp_path)
            if r.get("decision", {}).get("kind") == "offload" and r.get("result") == "started"
        ]
        assert started and all(r["decision"]["topic"] == ARCHIVE_TOPIC for r in started)
        assert 'pulsar_balancer_offloads_total{cluster="east",result="failed"}' in metrics
        failed_count = [
            line
            for line in metrics.splitlines()
            if line.startswith('pulsar_balancer_offloads_total{cluster="east",result="failed"}')
        ]
        assert float(failed_count[0].split()[-1]) >= 1
        bytes_line = [
            line
            for line in metrics.splitlines()
            if line.startswith('pulsar_balancer_offloaded_bytes_total{cluster="east"}')
        ]
        assert float(bytes_line[0].split()[-1]) == 0  # nothing moved, nothing counted
        summary = process.read_summary()
        assert summary["offloads"] == []  # no bytes before SUCCESS
        assert sim.topic_stats(ARCHIVE_TOPIC)["offloadedStorageSize"] == 0
    finally:
        sim.stop()
