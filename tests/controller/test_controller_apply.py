"""Controller paths that need a scripted admin API: 4xx vs 5xx, no-op splits, offload rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler
from balancer.controller.apply import Controller
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers, BreakerState
from balancer.controller.clock import FakeClock
from balancer.controller.handler import ControllerHandler
from balancer.controller.journal import Journal
from balancer.controller.layouts import LayoutCache
from balancer.controller.metrics_bridge import attach_metrics
from balancer.controller.offload_point import default_offload_point
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.settings import ControllerSettings
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.decisions import (
    OffloadDecision,
    SplitDecision,
    SplitInputs,
    SplitReason,
    offload_decision_id,
)
from balancer.core.detect import DetectionSettings
from balancer.core.limits import BundleLimits
from balancer.core.load import BundleLoad, TopicLoad, roll_up
from balancer.core.report import BatchHandler, LayoutProvider
from balancer.core.results import ActionResult, Decided
from balancer.core.split import ChildLoad, SplitAlgorithm
from balancer.core.thresholds import NamespacePolicy, PolicyOverride, Thresholds
from balancer.pulsar import ForbiddenError, ServerError, UnavailableError
from balancer.pulsar.models import InternalStats, LedgerInfo, MessageId, OffloadState, OffloadStatus
from tests.reports import batch_report

NS = "acme/orders"
PARENT = BundleRange(0, 0x40000000)


@dataclass
class FakeAdmin:
    layout: NamespaceBundles = field(default_factory=lambda: NamespaceBundles.initial(NS, 4))
    apply_splits: bool = True
    error: Exception | None = None
    ledgers: tuple[LedgerInfo, ...] = ()
    current_ledger_size: int = 0
    status: OffloadState = OffloadState.NOT_RUN
    calls: list[str] = field(default_factory=list)

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        if self.error is not None:
            raise self.error

    def get_bundles(self, namespace: str) -> NamespaceBundles:
        self._maybe_fail("get_bundles")
        return self.layout

    def split_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        algorithm: str,
        boundaries: Sequence[int] = (),
        unload: bool = False,
    ) -> None:
        self._maybe_fail(f"split:{algorithm}:{unload}")
        if self.apply_splits:
            assert isinstance(bundle, BundleRange)
            self.layout, _ = self.layout.split(bundle, boundaries)

    def internal_stats(self, topic: str) -> InternalStats:
        self._maybe_fail("internal_stats")
        return InternalStats(
            number_of_entries=0,
            total_size=0,
            current_ledger_entries=1,
            current_ledger_size=self.current_ledger_size,
            ledgers=self.ledgers,
        )

    def trigger_offload(self, topic: str, message_id: MessageId) -> None:
        self._maybe_fail(f"offload:{message_id.ledger_id}")

    def offload_status(self, topic: str) -> OffloadStatus:
        self._maybe_fail("offload_status")
        return OffloadStatus(self.status, "")


def split_decision(decision_id: str = "split-1", bundle: BundleRange = PARENT) -> SplitDecision:
    mid = bundle.lower + bundle.width // 2
    return SplitDecision(
        decision_id=decision_id,
        cluster="east",
        namespace=NS,
        bundle=bundle,
        algorithm=SplitAlgorithm.BALANCED_FLOW_DIVIDE,
        boundaries=(mid,),
        children=(
            ChildLoad(BundleRange(bundle.lower, mid), 1, 1.0, 1.0, 1),
            ChildLoad(BundleRange(mid, bundle.upper), 1, 1.0, 1.0, 1),
        ),
        reasons=(SplitReason.MSG_RATE,),
        window_end_ms=60_000,
        inputs=SplitInputs(1.0, 1.0, 2, 2, 1.0, 3, BundleLimits(), 4, 128),
    )


def offload_decision(threshold: int = 1000) -> OffloadDecision:
    topic = f"persistent://{NS}/t-partition-1"
    return OffloadDecision(
        decision_id=offload_decision_id(cluster="east", topic=topic, window_end_ms=1),
        cluster="east",
        namespace=NS,
        topic=topic,
        storage_size_bytes=10_000,
        offloaded_size_bytes=0,
        threshold_bytes=threshold,
        window_end_ms=1,
    )


def make(tmp_path: Path, admin: FakeAdmin, clock: FakeClock | None = None) -> Controller:
    clock = clock or FakeClock()
    return Controller(
        admin,
        settings=ControllerSettings(mode="apply"),
        journal=Journal(tmp_path / "j.sqlite3"),
        audit=AuditLog(tmp_path / "a.jsonl"),
        limits=ActionLimits(
            splits_per_minute=100,
            splits_per_minute_per_namespace=100,
            offloads_per_minute=100,
            offloads_per_minute_per_namespace=100,
            clock=clock,
        ),
        breakers=Breakers(failure_threshold=2, cooloff_s=60, clock=clock),
        clock=clock,
    )


def test_split_uses_specified_positions_and_unload(tmp_path: Path) -> None:
    admin = FakeAdmin()
    controller = make(tmp_path, admin)
    outcome = controller.apply_split(split_decision())
    assert outcome.result is ActionResult.APPLIED and outcome.children == 2
    assert admin.calls == ["get_bundles", "split:specified_positions_divide:True", "get_bundles"]
    assert controller.known_bundle_counts() == {("east", NS): 5}


def test_split_answered_204_without_effect_is_rechecked(tmp_path: Path) -> None:
    """Not failed at once: a layout read through a load balancer may still show the parent
    (test_controller_stale settles it)."""
    controller = make(tmp_path, FakeAdmin(apply_splits=False))
    outcome = controller.apply_split(split_decision())
    assert outcome.result is ActionResult.UNKNOWN and "lacks the boundaries" in outcome.detail
    entry = controller.journal.get("split-1")
    assert entry is not None and entry.result == "unknown"


@pytest.mark.parametrize(
    ("error", "opens"),
    [
        (ForbiddenError("no", status=403), False),
        (ServerError("boom", status=500), True),
        (UnavailableError("down"), True),
    ],
    ids=["4xx-is-an-answer", "5xx-counts", "no-answer-counts"],
)
def test_breaker_counts_only_server_failures(tmp_path: Path, error: Exception, opens: bool) -> None:
    admin = FakeAdmin(error=error)
    controller = make(tmp_path, admin)
    first = [controller.apply_split(split_decision(f"split-{i}")) for i in range(3)]
    state = controller.breaker_states()["east"].state
    assert (state is BreakerState.OPEN) is opens
    expected = [
        ActionResult.FAILED,
        ActionResult.FAILED,
        ActionResult.BREAKER_OPEN if opens else ActionResult.FAILED,
    ]
    assert [o.result for o in first] == expected


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [(0, (2, 0)), (1000, (2, 0)), (5000, (1, 0)), (6000, None)],
    ids=["zero", "1000", "5000", "6000-nothing"],
)
def test_default_offload_point_is_pulsars_rule(
    threshold: int, expected: tuple[int, int] | None
) -> None:
    stats = InternalStats(
        number_of_entries=0,
        total_size=0,
        current_ledger_entries=1,
        current_ledger_size=3000,
        ledgers=(
            LedgerInfo(0, 1, 1000, False),
            LedgerInfo(1, 1, 2000, False),
            LedgerInfo(2, 1, 0, False),
        ),
    )
    point = default_offload_point(stats, threshold)
    assert (None if point is None else (point.ledger_id, point.entry_id)) == expected


def test_offload_paths(tmp_path: Path) -> None:
    ledgers = (
        LedgerInfo(0, 1, 1000, False),
        LedgerInfo(1, 1, 2000, False),
        LedgerInfo(2, 1, 0, False),
    )
    admin = FakeAdmin(ledgers=ledgers, current_ledger_size=3000)
    controller = make(tmp_path, admin)
    nothing = controller.apply_offload(offload_decision(threshold=6000))
    assert nothing.result is ActionResult.NOTHING_TO_OFFLOAD
    done = controller.apply_offload(offload_decision(threshold=1000))
    assert done.result is ActionResult.STARTED and done.pulsar["bytes_to_offload"] == 3000
    assert "offload:2" in admin.calls
    # The same point decided again (a later window) is the same action: not sent twice.
    later = replace(offload_decision(), decision_id="offload-later", window_end_ms=2)
    assert controller.apply_offload(later).result is ActionResult.DUPLICATE
    assert admin.calls.count("offload:2") == 1
    admin.status = OffloadState.SUCCESS  # settled: the same point is still not sent twice
    assert controller.reconcile() == [(done.decision_id, ActionResult.APPLIED)]
    later2 = replace(offload_decision(), decision_id="offload-later-2", window_end_ms=3)
    assert controller.apply_offload(later2).result is ActionResult.DUPLICATE
    assert admin.calls.count("offload:2") == 1
    admin.status = OffloadState.RUNNING
    running = controller.apply_offload(replace(offload_decision(), decision_id="offload-3"))
    assert running.result is ActionResult.ALREADY_RUNNING


def test_reconcile_keeps_intent_pending_while_pulsar_is_down(tmp_path: Path) -> None:
    admin = FakeAdmin()
    controller = make(tmp_path, admin)
    controller.journal.record_intent(
        decision_id="d",
        kind="split",
        cluster="east",
        namespace=NS,
        target="t",
        action_key="k",
        payload={"call": {"bundle": str(PARENT), "boundaries": [0x20000000]}},
        batch_id=None,
        at_ms=1,
    )
    admin.error = UnavailableError("down")
    assert controller.reconcile() == []
    assert [e.decision_id for e in controller.journal.pending()] == ["d"]
    admin.error = None
    assert controller.reconcile() == [("d", ActionResult.ABANDONED)]


@dataclass
class Sink:
    splits: list[tuple[str, str, str, int]] = field(default_factory=list)
    offloads: list[tuple[str, str, int]] = field(default_factory=list)
    breakers: list[tuple[str, bool]] = field(default_factory=list)
    refused: list[tuple[str, SplitAlgorithm]] = field(default_factory=list)

    def record_split(
        self, cluster: str, result: ActionResult | Decided, reason: str, children: int = 0
    ) -> None:
        self.splits.append((cluster, result, reason, children))

    def record_split_algorithm_refused(self, cluster: str, algorithm: SplitAlgorithm) -> None:
        self.refused.append((cluster, algorithm))

    def record_offload(self, cluster: str, result: ActionResult, bytes_offloaded: int = 0) -> None:
        self.offloads.append((cluster, result, bytes_offloaded))

    def set_breaker(self, cluster: str, open: bool) -> None:
        self.breakers.append((cluster, open))


def test_metrics_bridge_maps_outcomes(tmp_path: Path) -> None:
    admin = FakeAdmin(
        ledgers=(LedgerInfo(0, 1, 1000, False), LedgerInfo(1, 1, 0, False)),
        current_ledger_size=5000,
    )
    controller = make(tmp_path, admin)
    sink = Sink()
    attach_metrics(controller, sink)

    def broken(_: Any) -> None:
        raise RuntimeError("listener bug")

    controller.add_listener(broken)  # must not stop the controller
    controller.apply_split(split_decision())
    controller.apply_split(split_decision())  # the same decision again: a duplicate
    controller.apply_offload(offload_decision(threshold=100))
    assert sink.splits == [
        ("east", "decided", "MsgRate", 0),
        ("east", "applied", "MsgRate", 2),
        ("east", "decided", "MsgRate", 0),
        ("east", "duplicate", "MsgRate", 0),
    ]
    assert sink.offloads == [("east", "started", 0)]  # bytes once its status says SUCCESS
    assert sink.breakers == [("east", False)] * 3


def test_handler_protocol_surface(tmp_path: Path) -> None:
    thresholds = Thresholds(
        NamespacePolicy(offload_threshold_bytes=10**10),
        (
            PolicyOverride("acme/logs", offload_threshold_bytes=10**9),
            PolicyOverride("acme/off", offload_enabled=False),
        ),
    )
    handler = ControllerHandler(
        make(tmp_path, FakeAdmin()), thresholds=thresholds, detection=DetectionSettings()
    )
    assert handler.offload_min_bytes == 10**9
    hot = BundleLoad("east", NS, PARENT, 1, msg_rate_in=40_000.0, topic_count=3)
    cold = BundleLoad("east", NS, PARENT, 1, msg_rate_in=10.0, topic_count=3)
    assert handler.wants_topics(hot) and not handler.wants_topics(cold)
    handler.close()


def test_handler_waits_for_hysteresis_and_counts_skips(tmp_path: Path) -> None:
    config = BalancerConfig.from_mapping(
        {
            "clusters": [{"name": "east", "admin_url": "http://127.0.0.1:1"}],
            "controller": {
                "mode": "apply",
                "journal_path": str(tmp_path / "j.sqlite3"),
                "audit_log_path": str(tmp_path / "a.jsonl"),
            },
        }
    )
    admin = FakeAdmin()
    handler = build_handler(config, admin, clock=FakeClock())
    topics = tuple(
        TopicLoad(f"persistent://{NS}/t{i}", 0x01000000 * (i + 1), msg_rate_in=8000.0)
        for i in range(5)
    )
    for i in range(3):
        load = roll_up(
            cluster="east", namespace=NS, bundle=PARENT, window_end_ms=(i + 1) * 1000, topics=topics
        )
        handler.handle(batch_report(i, (i + 1) * 1000, (load,)))
    assert [o.result for o in handler.last_outcomes] == [ActionResult.APPLIED]
    counters = handler.stats.snapshot().counters
    assert counters[("split", "skipped", "hysteresis")] == 2
    assert counters[("split", "applied", "MsgRate")] == 1
    handler.close()


def test_handler_is_the_streams_batch_handler_and_skips_batches_without_a_window(
    tmp_path: Path,
) -> None:
    admin = FakeAdmin()
    handler: BatchHandler = ControllerHandler(
        make(tmp_path, admin),
        thresholds=Thresholds(),
        detection=DetectionSettings(hit_count_threshold=3),
    )
    layouts: LayoutProvider = handler.layouts  # type: ignore[attr-defined]
    topics = tuple(
        TopicLoad(f"persistent://{NS}/t{i}", 0x01000000 * (i + 1), msg_rate_in=8000.0)
        for i in range(5)
    )

    def hot(window_end_ms: int) -> tuple[BundleLoad, ...]:
        return (
            roll_up(
                cluster="east",
                namespace=NS,
                bundle=PARENT,
                window_end_ms=window_end_ms,
                topics=topics,
            ),
        )

    handler.handle(batch_report(1, 1000, hot(1000)))
    handler.handle(batch_report(2, 2000, hot(2000)))
    handler.handle(batch_report(3, 0, ()))  # no window closed: counts must survive
    handler.handle(batch_report(4, 3000, hot(3000)))
    assert isinstance(handler, ControllerHandler)
    assert [o.result for o in handler.last_outcomes] == [ActionResult.APPLIED]
    # The stream sees the children at once, without asking Pulsar again.
    calls = len(admin.calls)
    assert not layouts.layout("east", NS).has(PARENT)
    assert len(admin.calls) == calls
    handler.close()


def test_layout_cache_refresh_and_fallbacks() -> None:
    clock = FakeClock()
    admin = FakeAdmin()
    breakers = Breakers(failure_threshold=1, cooloff_s=60, clock=clock)
    cache = LayoutCache(admin, clock=clock, breakers=breakers, refresh_s=30)
    assert cache.layout("east", NS) == admin.layout and admin.calls == ["get_bundles"]
    assert cache.layout("east", NS) == admin.layout and len(admin.calls) == 1  # fresh
    before = admin.layout
    admin.layout, _ = admin.layout.split(PARENT, [0x20000000])
    clock.advance(31)
    assert cache.layout("east", NS) == admin.layout  # re-read once stale
    clock.advance(31)
    admin.error = ServerError("boom", status=503)
    assert cache.layout("east", NS) != before and cache.layout("east", NS) == cache.get("east", NS)
    assert breakers.for_cluster("east").status().state is BreakerState.OPEN
    calls = len(admin.calls)
    assert cache.layout("east", "acme/unknown") == NamespaceBundles.initial("acme/unknown", 4)
    assert len(admin.calls) == calls  # breaker open: Pulsar is not asked
    assert cache.bundle_counts() == {("east", NS): 5}
    assert cache.known_topics("east", NS) is None


def test_handler_retries_reconciliation_until_pulsar_answers(tmp_path: Path) -> None:
    admin = FakeAdmin(error=UnavailableError("down"))
    controller = make(tmp_path, admin)
    controller.journal.record_intent(
        decision_id="d",
        kind="split",
        cluster="east",
        namespace=NS,
        target="t",
        action_key="k",
        payload={"call": {"bundle": str(PARENT), "boundaries": [0x20000000]}},
        batch_id=None,
        at_ms=1,
    )
    handler = ControllerHandler(controller, thresholds=Thresholds(), detection=DetectionSettings())
    handler.handle(batch_report(1, 0, ()))
    assert [e.decision_id for e in controller.journal.pending()] == ["d"]
    admin.error = None
    handler.handle(batch_report(2, 0, ()))
    entry = controller.journal.get("d")
    assert controller.journal.pending() == [] and entry is not None
    assert entry.result == "abandoned"
    handler.close()


def test_every_controller_result_has_a_metric_label() -> None:
    from balancer.core.results import MOVE_RESULTS, OFFLOAD_RESULTS, SPLIT_RESULTS

    assert ActionResult.APPLIED in SPLIT_RESULTS
    assert {ActionResult.APPLIED, ActionResult.STARTED} <= OFFLOAD_RESULTS
    assert ActionResult.STARTED not in SPLIT_RESULTS and ActionResult.STALE not in OFFLOAD_RESULTS
    assert {ActionResult.LANDED_ELSEWHERE, ActionResult.UNKNOWN} <= MOVE_RESULTS
    assert ActionResult.LANDED_ELSEWHERE not in SPLIT_RESULTS | OFFLOAD_RESULTS
    assert ActionResult.STARTED not in MOVE_RESULTS
    # No controller result is silently dropped by every label set.
    assert set(ActionResult) == SPLIT_RESULTS | OFFLOAD_RESULTS | MOVE_RESULTS


def test_every_action_result_is_exported_with_its_own_value(tmp_path: Path) -> None:
    """The exporter takes the controller's results as they are: each label value is the
    result's value (docs/operations.md, alerts and dashboards select on these)."""
    from prometheus_client import CollectorRegistry

    from balancer.core.results import DECIDED, OFFLOAD_RESULTS, SPLIT_RESULTS
    from balancer.ops.exporter import BalancerMetrics

    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda _c, _n: None, process_metrics=False)
    for split_result in (DECIDED, *SPLIT_RESULTS):
        metrics.record_split("east", split_result, "MsgRate")
        labels = {"cluster": "east", "result": str(split_result), "reason": "MsgRate"}
        assert registry.get_sample_value("pulsar_balancer_splits_total", labels) == 1
    for result in OFFLOAD_RESULTS:
        metrics.record_offload("east", result)
        labels = {"cluster": "east", "result": result.value}
        assert registry.get_sample_value("pulsar_balancer_offloads_total", labels) == 1
    for wrong in (ActionResult.STARTED, ActionResult.ALREADY_RUNNING):
        with pytest.raises(ValueError):
            metrics.record_split("east", wrong, "MsgRate")
    with pytest.raises(ValueError):
        metrics.record_offload("east", ActionResult.STALE)


def _archive(storage_bytes: int) -> tuple[tuple[str, TopicLoad], ...]:
    # broker-stats has no offloadedStorageSize: the stream's value is always 0
    return (("east", TopicLoad(f"persistent://{NS}/archive", 1, storage_size=storage_bytes)),)


def test_an_offloaded_topic_is_not_offloaded_again_while_bookkeeper_is_under(
    tmp_path: Path,
) -> None:
    """storageSize still counts offloaded ledgers; the bytes in BookKeeper decide."""
    closed = (
        LedgerInfo(10, 5, 4000, True),
        LedgerInfo(11, 5, 4000, True),
        LedgerInfo(12, 5, 4000, False),
    )
    admin = FakeAdmin(ledgers=(*closed, LedgerInfo(13, 0, 0, False)), current_ledger_size=1000)
    handler = ControllerHandler(
        make(tmp_path, admin),
        detection=DetectionSettings(),
        thresholds=Thresholds(NamespacePolicy(offload_threshold_bytes=10_000)),
    )
    handler.handle(batch_report(1, 1000, (), _archive(13_000)))  # 5000 bytes left in BookKeeper
    assert handler.last_outcomes == ()
    assert admin.calls == ["internal_stats"]  # read once, nothing decided, nothing triggered
    # Under by storageSize: not even read.
    handler.handle(batch_report(2, 2000, (), _archive(9_000)))
    assert admin.calls == ["internal_stats"]
    # Newer ledgers push BookKeeper over the threshold: offload what is over, and only that.
    admin.ledgers = (
        *closed,
        *(LedgerInfo(i, 5, 4000, False) for i in (13, 14)),
        LedgerInfo(15, 0, 0, False),
    )
    handler.handle(batch_report(3, 3000, (), _archive(21_000)))  # 13000 in BookKeeper
    [outcome] = handler.last_outcomes
    assert outcome.result is ActionResult.STARTED and "offload:13" in admin.calls
    # ledger 12: the offloaded ones are not counted
    assert outcome.pulsar["bytes_to_offload"] == 4000
    handler.close()


def test_an_unread_bookkeeper_size_decides_nothing_this_window(tmp_path: Path) -> None:
    admin = FakeAdmin(error=UnavailableError("down"))
    handler = ControllerHandler(
        make(tmp_path, admin),
        detection=DetectionSettings(),
        thresholds=Thresholds(NamespacePolicy(offload_threshold_bytes=10_000)),
    )
    handler.handle(batch_report(1, 1000, (), _archive(13_000)))
    assert handler.last_outcomes == () and admin.calls == ["internal_stats"]
    assert (handler.bookkeeper.reads, handler.bookkeeper.failures) == (1, 1)
    handler.close()
