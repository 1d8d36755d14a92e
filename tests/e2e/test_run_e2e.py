"""The whole stack, end to end: simulator -> collector -> Kafka -> Spark -> controller -> Pulsar.

Each test runs the real `pulsar-balancer run --config` process (real Spark, the session's
real Kafka-protocol broker) against a simulated two-cluster peer group that requires a
bearer token, and checks what happened in the simulated Pulsar.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.core.arrow_envelope import is_arrow_envelope
from balancer.core.bundles import BundleRange
from balancer.core.detect import over_threshold
from balancer.core.limits import BundleLimits
from balancer.core.load import roll_up
from balancer.core.round_marker import is_round_marker
from balancer.core.split import SplitAlgorithm, SplitOptions, compute_split
from balancer.kafka.topics import ensure_topics
from balancer.sim import PeerGroup, RunningPeerGroup
from tests.e2e.harness import (
    SCENARIO,
    SECRET_TOKEN,
    BalancerProcess,
    audit_records,
    committed_offsets,
    events_between,
    wait_for,
    write_config,
)
from tests.kafka_broker import Broker
from tests.prometheus_server import PrometheusServer, QueryProblem, check_dashboards

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.kafka]

HOT = "e2e/hot"
ARCHIVE_TOPIC = "persistent://e2e/archive/archive"
TIME_SCALE = 10.0  # 1 real second = 10 simulated seconds
LIMITS = BundleLimits()  # Pulsar's defaults, as the balancer's config uses them
STATS_PARTITIONS = 4
ALERT_RULES = Path(__file__).resolve().parents[2] / "conf" / "prometheus" / "alerts.yaml"


def start_sim() -> RunningPeerGroup:
    group = PeerGroup.from_scenario(SCENARIO, time_scale=TIME_SCALE)
    return group.start(required_token=SECRET_TOKEN)


def hot_bundles_split(sim: RunningPeerGroup) -> bool:
    """Every bundle of e2e/hot that was over the limits at the start has been split."""
    return {s.parent for s in sim.model.splits if s.namespace == HOT} >= _hot_at_start()


@functools.cache
def _hot_at_start() -> frozenset[BundleRange]:
    # Asked in every wait loop: the scenario is read once.
    return frozenset(hot_bundles_at_start())


def hot_bundles_at_start() -> list[BundleRange]:
    """The bundles of e2e/hot over Pulsar's limits in the scenario's constant traffic."""
    group = PeerGroup.from_scenario(SCENARIO)
    ns = group.model.namespaces[HOT]
    return [b for b in ns.layout.bundles if over_threshold(_load(group.model, ns, b), LIMITS)]


def _load(model: Any, ns: Any, bundle: BundleRange) -> Any:
    return roll_up(
        cluster="west",
        namespace=HOT,
        bundle=bundle,
        window_end_ms=0,
        topics=tuple(model.topic_loads(ns, bundle)),
    )


def bad_messages(valid: dict[str, Any]) -> list[tuple[bytes, str]]:
    """Malformed events, each with the reason it must be rejected for."""

    def with_(**changes: Any) -> bytes:
        return json.dumps({**valid, **changes}).encode()

    missing = {k: v for k, v in valid.items() if k != "msgRateIn"}
    return [
        (b"{not json", "bad_json"),
        (b"\xff\xfe\x00\x01binary garbage", "bad_encoding"),
        (b"[1, 2, 3]", "not_an_object"),
        (json.dumps(missing).encode(), "missing_field"),
        (with_(msgRateIn="fast"), "wrong_type"),
        (with_(msgRateOut=-5.0), "negative_value"),
        (with_(msgThroughputIn=10**400), "not_finite"),
        (with_(storageSize=2**64), "wrong_type"),
        (with_(topic="persistent://a/b/c/d/e"), "invalid_topic"),
        (with_(timestamp_ms=1_700_000_000), "timestamp_out_of_range"),
        (with_(unexpected=1), "unknown_field"),
    ]


def inject(kafka: Broker, topic: str, messages: list[tuple[bytes, str]]) -> None:
    kafka.produce(topic, [m for m, _ in messages], key=b"injected")


@dataclass
class Run:
    sim: RunningPeerGroup
    process: BalancerProcess
    tmp: Path
    summary: dict[str, Any]
    injected: Counter[str]
    exit_code: int
    dashboard_problems: list[QueryProblem]
    rule_health: dict[str, str]
    probes: dict[str, int]


def metrics_target(process: BalancerProcess) -> str:
    """host:port of the running balancer's metrics endpoint, from its start-up line."""
    found = re.search(r"metrics: http://(127\.0\.0\.1:\d+)/metrics", process.text())
    assert found, process.text()[-2000:]
    return found.group(1)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def rule_health(prometheus: PrometheusServer) -> dict[str, str]:
    """Every alert rule Prometheus loaded, with its evaluation health (ok / err / unknown)."""
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/rules", timeout=10) as answer:
        groups = json.load(answer)["data"]["groups"]
    return {rule["name"]: rule["health"] for g in groups for rule in g["rules"]}


@pytest.fixture(scope="module")
def applied_run(kafka: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One apply-mode run until both hot bundles are split and the archive topic offloaded."""
    tmp = tmp_path_factory.mktemp("e2e-apply")
    sim = start_sim()
    try:
        topic = f"stats-{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka.bootstrap_servers, {topic: STATS_PARTITIONS, f"{topic}-dlq": 1})
        valid = {
            "cluster": "east",
            "topic": ARCHIVE_TOPIC,
            "timestamp_ms": 1_790_000_000_000,
            "msgRateIn": 1.0,
            "msgRateOut": 1.0,
            "msgThroughputIn": 1.0,
            "msgThroughputOut": 1.0,
            "storageSize": 1,
            "backlogSize": 0,
            "offloadedStorageSize": 0,
            "producerCount": 1,
            "consumerCount": 1,
        }
        messages = bad_messages(valid)
        half = len(messages) // 2
        inject(kafka, topic, messages[:half])  # before the run ...
        config = write_config(
            tmp,
            sim=sim,
            bootstrap_servers=kafka.bootstrap_servers,
            mode="apply",
            stats_topic=topic,
        )
        process = BalancerProcess(config, tmp, tmp / "summary.json").start()
        prometheus: PrometheusServer | None = None
        try:
            wait_for(
                lambda: "metrics: http://" in process.text(),
                timeout_s=120,
                what="the metrics endpoint",
                process=process,
            )
            # A real Prometheus scrapes the run and evaluates the shipped alert rules.
            prometheus = PrometheusServer(
                [metrics_target(process)], scrape_interval_s=1.0, rule_files=[ALERT_RULES]
            ).start()
            wait_for(
                lambda: bool(sim.model.splits),
                timeout_s=300,
                what="the first split",
                process=process,
            )
            inject(kafka, topic, messages[half:])  # ... and during it
            wait_for(
                lambda: (
                    hot_bundles_split(sim)
                    and sim.topic_stats(ARCHIVE_TOPIC)["offloadedStorageSize"] > 0
                ),
                timeout_s=300,
                what="both splits and the offload",
                process=process,
            )
            # A few more micro-batches: an over-eager balancer would split the children again.
            seen = process.batches()
            wait_for(
                lambda: process.batches() >= seen + 4,
                timeout_s=120,
                what="four more micro-batches",
                process=process,
            )
            prometheus.wait_for_scrapes(samples=10, timeout_s=60)
            problems = check_dashboards(prometheus)
            health = rule_health(prometheus)
            probes = {
                path: http_status(f"http://{metrics_target(process)}{path}")
                for path in ("/healthz", "/readyz")
            }
        finally:
            if prometheus is not None:
                prometheus.stop()
            code = process.stop()
        yield Run(
            sim,
            process,
            tmp,
            process.read_summary(),
            Counter(reason for _, reason in messages),
            code,
            problems,
            health,
            probes,
        )
    finally:
        sim.stop()


def test_run_exits_cleanly_and_summarises(applied_run: Run) -> None:
    s = applied_run.summary
    assert applied_run.exit_code == 0, applied_run.process.text()[-3000:]
    for key in (
        "bundles_before",
        "bundles_after",
        "splits",
        "offloads",
        "events_processed",
        "events_rejected",
    ):
        assert key in s
    assert s["bundles_before"][HOT] == 4
    assert s["bundles_after"][HOT] == applied_run.sim.bundles(HOT).num_bundles > 4
    assert s["events_processed"] > 0
    assert s["stream_error"] is None


def test_hot_bundles_are_split_once_at_flow_equal_boundaries(applied_run: Run) -> None:
    sim = applied_run.sim
    splits = [s for s in sim.model.splits if s.namespace == HOT]
    parents = [s.parent for s in splits]
    assert sorted(parents) == sorted(hot_bundles_at_start()), "each hot bundle split exactly once"
    for record in splits:
        # Pulsar was told exactly where to split ...
        assert record.algorithm == "specified_positions_divide"
        # ... and those are the flow-equal points for the bundle's load.
        expected = compute_split(
            SplitAlgorithm.BALANCED_FLOW_DIVIDE,
            record.parent,
            _topics_in(sim, record.parent),
            SplitOptions(),
        )
        assert tuple(record.boundaries) == expected.boundaries
        assert len(record.children) == len(expected.boundaries) + 1
    # The summary reports what was applied, with the same boundaries.
    reported = {(s["bundle"], tuple(s["boundaries"])) for s in applied_run.summary["splits"]}
    assert reported == {(str(r.parent), tuple(f"0x{b:08x}" for b in r.boundaries)) for r in splits}


def _topics_in(sim: RunningPeerGroup, parent: BundleRange) -> list[Any]:
    """Topic loads of a (possibly already split) parent range: the union of its children."""
    ns = sim.model.namespaces[HOT]
    loads = []
    for bundle in ns.layout.bundles:
        if parent.lower <= bundle.lower and bundle.upper <= parent.upper:
            loads.extend(sim.model.topic_loads(ns, bundle))
    return loads


def test_every_bundle_is_under_threshold_afterwards(applied_run: Run) -> None:
    sim = applied_run.sim
    ns = sim.model.namespaces[HOT]
    over = {str(b): over_threshold(_load(sim.model, ns, b), LIMITS) for b in ns.layout.bundles}
    assert not any(over.values()), over


def test_topic_past_its_size_threshold_is_offloaded(applied_run: Run) -> None:
    stats = applied_run.sim.topic_stats(ARCHIVE_TOPIC)
    assert stats["offloadedStorageSize"] > 0
    # storageSize still counts the offloaded ledgers, as Pulsar's does; BookKeeper holds less.
    assert stats["storageSize"] >= 12 * 1024**3  # started at 12 GiB and grows
    assert stats["storageSize"] - stats["offloadedStorageSize"] < 12 * 1024**3
    offloaded = [o for o in applied_run.summary["offloads"] if o["topic"] == ARCHIVE_TOPIC]
    assert offloaded and offloaded[0]["cluster"] == "east"


def test_an_offloaded_topic_is_not_offloaded_again(applied_run: Run) -> None:
    """Once BookKeeper holds less than the threshold, no further offload is decided, though
    broker-stats' storageSize stays over it: the summary shows what really moved."""
    offloads = [o for o in applied_run.summary["offloads"] if o["topic"] == ARCHIVE_TOPIC]
    assert offloads and all(o["bytes_offloaded"] > 0 for o in offloads)
    assert applied_run.sim.model.requests(route="offload") == len(offloads)
    results = Counter(
        r["result"]
        for r in audit_records(applied_run.tmp)
        if r.get("decision", {}).get("kind") == "offload"
    )
    # Only the offload itself (`started`: a 204 only starts it) and, while it runs, "already
    # running": no repeats after it. Its status followed to SUCCESS makes it `applied`.
    assert set(results) <= {"started", "already_running"}, results
    assert results["started"] == len(offloads)
    followed = [
        r["result"]
        for r in audit_records(applied_run.tmp)
        if r.get("followed") and r.get("kind") == "offload"
    ]
    assert followed == ["applied"] * len(offloads)


def test_namespace_on_a_peer_cluster_is_acted_on_where_its_stats_came_from(
    applied_run: Run,
) -> None:
    sim = applied_run.sim
    records = [s for s in sim.model.splits if s.namespace == HOT]
    assert records and all(r.cluster == "west" for r in records)
    # east is the entry cluster, but the hot namespace's stats came from west: its reads and
    # splits went straight to west (east would have answered a stale layout, not a 307).
    assert "redirect east -> west" not in (applied_run.tmp / "balancer.log").read_text()
    assert sim.model.requests(route="split", cluster="west") == len(records)
    assert sim.model.requests(route="split", cluster="east") == 0


def test_malformed_events_are_rejected_with_reasons_and_the_run_continues(
    applied_run: Run,
) -> None:
    by_reason = applied_run.summary["events_rejected_by_reason"]
    assert by_reason == dict(applied_run.injected)
    assert applied_run.summary["events_rejected"] == sum(applied_run.injected.values())
    # Half were injected after the first split: the run went on to split and offload.
    assert applied_run.summary["splits"] and applied_run.summary["offloads"]


def test_liveness_and_readiness_probes_pass_while_running(applied_run: Run) -> None:
    # What Kubernetes asks: alive, and ready (stream up, recent batch, Kafka, a cluster).
    assert applied_run.probes == {"/healthz": 200, "/readyz": 200}


def test_every_dashboard_panel_has_data_from_a_real_run(applied_run: Run) -> None:
    assert applied_run.dashboard_problems == []


def test_every_alert_rule_evaluates_against_a_real_run(applied_run: Run) -> None:
    assert applied_run.rule_health, "no alert rules loaded"
    assert {name: h for name, h in applied_run.rule_health.items() if h != "ok"} == {}


def test_the_token_never_appears_in_output_logs_or_audit(applied_run: Run) -> None:
    tmp = applied_run.tmp
    assert applied_run.sim.unauthorized_requests == 0  # it was sent on every call
    texts = {
        "output": applied_run.process.text(),
        "audit": (tmp / "audit.jsonl").read_text(),
        "summary": json.dumps(applied_run.summary),
    }
    for log_file in tmp.glob("*.log"):
        texts[log_file.name] = log_file.read_text(errors="replace")
    for name, text in texts.items():
        assert SECRET_TOKEN not in text, f"token leaked into {name}"


def test_dry_run_changes_nothing(kafka: Broker, tmp_path: Path) -> None:
    sim = start_sim()
    try:
        config = write_config(
            tmp_path, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="dry-run"
        )
        process = BalancerProcess(config, tmp_path, tmp_path / "summary.json").start()
        try:

            def planned() -> set[str]:
                return {r.get("result") for r in audit_records(tmp_path)} & {"dry_run"}

            wait_for(
                lambda: bool(planned()), timeout_s=300, what="a dry-run decision", process=process
            )
        finally:
            assert process.stop() == 0, process.text()[-3000:]
        assert sim.model.splits == []
        assert sim.model.requests(route="split") == 0
        assert sim.model.requests(route="offload") == 0
        assert sim.topic_stats(ARCHIVE_TOPIC)["offloadedStorageSize"] == 0
        summary = process.read_summary()
        assert summary["mode"] == "dry-run" and summary["splits"] == []
    finally:
        sim.stop()


def test_sigkill_and_restart_apply_nothing_twice_and_lose_no_event(
    kafka: Broker, tmp_path: Path
) -> None:
    sim = start_sim()
    try:
        config = write_config(
            tmp_path, sim=sim, bootstrap_servers=kafka.bootstrap_servers, mode="apply"
        )
        checkpoint = tmp_path / "checkpoints"
        first = BalancerProcess(config, tmp_path, tmp_path / "summary-1.json").start()
        try:
            wait_for(
                lambda: bool(sim.model.splits), timeout_s=300, what="the first split", process=first
            )
        finally:
            first.kill()  # mid-way: more splits and the offload are still to come
        at_kill = committed_offsets(checkpoint)
        splits_at_kill = len(sim.model.splits)
        second = BalancerProcess(config, tmp_path, tmp_path / "summary-2.json").start()
        try:
            wait_for(
                lambda: (
                    hot_bundles_split(sim)
                    and sim.topic_stats(ARCHIVE_TOPIC)["offloadedStorageSize"] > 0
                ),
                timeout_s=300,
                what="the rest of the work after the restart",
                process=second,
            )
            # The restarted stream replays the batch the kill interrupted, then goes on: give
            # it several micro-batches in which it could (wrongly) act again.
            wait_for(
                lambda: second.batches() >= 5,
                timeout_s=180,
                what="five micro-batches after the restart",
                process=second,
            )
        finally:
            assert second.stop() == 0, second.text()[-3000:]
        # No action applied twice: each bundle split once, each decision applied once.
        parents = [s.parent for s in sim.model.splits]
        assert len(parents) == len(set(parents)) >= splits_at_kill
        with sqlite3.connect(tmp_path / "journal.sqlite3") as db:
            applied = db.execute(
                "SELECT action_key, COUNT(*) FROM actions WHERE result = 'applied' "
                "GROUP BY action_key HAVING COUNT(*) > 1"
            ).fetchall()
        assert applied == []
        # No event lost or counted twice: the restarted stream consumed exactly the events
        # between the offsets committed before the kill and those committed at the end (the
        # collector sends envelopes: a record carries many events).
        at_end = committed_offsets(checkpoint)
        topic = yaml.safe_load(config.read_text())["kafka"]["stats_topic"]
        records = kafka.read_all(topic)
        # The collector's default (collector.envelope_format): Arrow envelopes, read by the
        # stream with every event counted once across the kill.
        assert all(is_arrow_envelope(r.value) for r in records if not is_round_marker(r.value))
        expected = events_between(records, at_kill, at_end)
        assert expected > sum(at_end[p] - at_kill.get(p, 0) for p in at_end)  # envelopes
        summary = second.read_summary()
        assert summary["events_processed"] + summary["events_rejected"] == expected
    finally:
        sim.stop()
