"""The live state says, per bundle over its limit, how many more windows it needs before a
split (issue 36); the live view (balancer/app/liveview.py) can show it."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from balancer.app.app_handler import AppHandler, LiveState
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler
from balancer.core.bundles import BundleRange
from balancer.core.detect import BundleHits, DetectionSettings, DetectorState, windows_to_split
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad, roll_up
from balancer.core.report import BatchReport
from balancer.ops.exporter import BalancerMetrics
from balancer.pulsar import PulsarPeerGroup
from tests.reports import batch_report

TOPICS = ("persistent://acme/pay/a", "persistent://acme/pay/b")
BUNDLE = BundleRange(0, 0x100000000 - 1)
KEY = ("east", "acme/pay", BUNDLE)


def report(batch_id: int, rate_each: float) -> BatchReport:
    topics = tuple(
        TopicLoad(topic=t, position=hash_position(t), msg_rate_in=rate_each) for t in TOPICS
    )
    bundle = roll_up(
        cluster="east",
        namespace="acme/pay",
        bundle=BUNDLE,
        window_end_ms=60_000 * (batch_id + 1),
        topics=topics,
    )
    return batch_report(
        batch_id, bundle.window_end_ms, (bundle,), events_consumed=2, duration_s=0.1
    )


def test_windows_to_split_counts_down_from_the_hit_count() -> None:
    settings = DetectionSettings(hit_count_threshold=3)
    assert windows_to_split(DetectorState(), KEY, settings) == 3
    state = DetectorState(hits={KEY: BundleHits(2, 120_000)})
    assert windows_to_split(state, KEY, settings) == 1
    state = DetectorState(hits={KEY: BundleHits(5, 300_000)})
    assert windows_to_split(state, KEY, settings) == 0


def test_the_live_state_counts_down_each_window_over_the_limit(tmp_path: Path) -> None:
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
    metrics = BalancerMetrics(
        CollectorRegistry(),
        limits=lambda c, ns: thresholds.policy_for(ns).limits,
        process_metrics=False,
    )
    live = LiveState()
    with PulsarPeerGroup.single("east", "http://127.0.0.1:9") as admin:
        handler = AppHandler(
            build_handler(config, admin), metrics, live, lambda ns: thresholds.policy_for(ns).limits
        )
        handler.handle(report(0, 20_000.0))  # 40,000 msg/s against 30,000
        assert live.windows_to_split == {KEY: 2}
        handler.handle(report(1, 20_000.0))
        assert live.windows_to_split == {KEY: 1}
        handler.handle(report(2, 1_000.0))  # under: nothing to show
        assert live.windows_to_split == {}
        handler.handle(report(3, 20_000.0))  # the count starts again
        assert live.windows_to_split == {KEY: 2}
        handler.controller.close()


def test_the_live_view_says_how_soon_each_bundle_over_its_limit_is_split() -> None:
    from rich.console import Console

    from balancer.app.liveview import render_live

    live = LiveState()
    (bundle,) = report(0, 20_000.0).bundles
    live.over_threshold = [(bundle, 1.33)]
    live.windows_to_split = {KEY: 2}

    def text() -> str:
        console = Console(width=160, record=True)
        console.print(render_live(live, mode="apply", elapsed_s=30, duration_s=None))
        return console.export_text()

    assert "split after 2 more windows over" in text()
    live.windows_to_split = {KEY: 0}
    assert "split due" in text()
