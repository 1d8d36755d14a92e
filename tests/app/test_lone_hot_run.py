"""The run's batch handler finds lone hot topics each window: live view, summary, metric."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from balancer.app.app_handler import AppHandler, LiveState
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler
from balancer.core.bundles import BundleRange
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad, roll_up
from balancer.core.report import BatchReport
from balancer.ops.exporter import BalancerMetrics
from balancer.pulsar import PulsarPeerGroup
from tests.reports import batch_report

TOPIC = "persistent://acme/pay/ledger"


def report(batch_id: int, rate: float) -> BatchReport:
    hot = TopicLoad(topic=TOPIC, position=hash_position(TOPIC), msg_rate_in=rate)
    bundle = roll_up(
        cluster="east",
        namespace="acme/pay",
        bundle=BundleRange(0, 0x40000000),
        window_end_ms=60_000 * (batch_id + 1),
        topics=(hot,),
    )
    return batch_report(
        batch_id, bundle.window_end_ms, (bundle,), events_consumed=1, duration_s=0.1
    )


def test_a_lone_hot_topic_reaches_live_state_summary_and_metric(tmp_path: Path) -> None:
    config = BalancerConfig.from_mapping(
        {
            # Never called: dry-run decides without asking Pulsar.
            "clusters": [{"name": "east", "admin_url": "http://127.0.0.1:9"}],
            "controller": {
                "journal_path": str(tmp_path / "journal.sqlite3"),
                "audit_log_path": str(tmp_path / "audit.jsonl"),
            },
        }
    )
    thresholds = config.thresholds_model()
    registry = CollectorRegistry()
    metrics = BalancerMetrics(
        registry,
        limits=lambda c, ns: thresholds.policy_for(ns).limits,
        process_metrics=False,
    )
    live = LiveState()
    with PulsarPeerGroup.single("east", "http://127.0.0.1:9") as admin:
        handler = AppHandler(
            build_handler(config, admin),
            metrics,
            live,
            lambda ns: thresholds.policy_for(ns).limits,
        )
        handler.handle(report(0, 45_000.0))  # 45,000 msg/s against 30,000: alone over
        name = "pulsar_balancer_lone_hot_topic_recommended_partitions"
        labels = {"cluster": "east", "namespace": "acme/pay", "topic": TOPIC}
        # 45,000 / (30,000 x 0.8) -> 2 partitions
        assert registry.get_sample_value(name, labels) == 2
        assert [h.topic for h in live.lone_hot_topics] == [TOPIC]
        handler.handle(report(1, 100.0))  # cooled down: the series and the live row go
        assert registry.get_sample_value(name, labels) is None
        assert live.lone_hot_topics == []
        # The summary keeps every topic seen during the run.
        assert list(live.lone_hot_seen) == [("east", TOPIC)]
        handler.controller.close()
