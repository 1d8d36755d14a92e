"""The exporter on a fresh explicit registry: values read back with get_sample_value."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from balancer.core.bundles import BundleRange
from balancer.core.lease import LeaseStatus
from balancer.core.limits import BundleLimits
from balancer.core.load import BundleLoad
from balancer.core.results import ActionResult
from balancer.ops.exporter import BalancerMetrics, snapshot_family_names
from tests.reports import batch_report

NS = "acme/orders"
B0 = BundleRange.parse("0x00000000_0x80000000")
B1 = BundleRange.parse("0x80000000_0xffffffff")


class FakeClock:
    def __init__(self, now_s: float = 1_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def load(bundle: BundleRange = B0, *, cluster: str = "east", **kw: float) -> BundleLoad:
    values: dict[str, float] = {"msg_rate_in": 100.0, "msg_rate_out": 200.0}
    values.update(kw)
    return BundleLoad(
        cluster=cluster,
        namespace=NS,
        bundle=bundle,
        window_end_ms=int(values.pop("window_end_ms", 60_000)),
        msg_rate_in=values.get("msg_rate_in", 0.0),
        msg_rate_out=values.get("msg_rate_out", 0.0),
        msg_throughput_in=values.get("msg_throughput_in", 0.0),
        msg_throughput_out=values.get("msg_throughput_out", 0.0),
        topic_count=int(values.get("topic_count", 10)),
        session_count=int(values.get("session_count", 20)),
        reported_topics=int(values.get("reported_topics", 10)),
        known_topics=int(values.get("known_topics", 10)),
    )


PULSAR_LIMITS = BundleLimits()


def make(
    limits: BundleLimits | None = PULSAR_LIMITS,
) -> tuple[BalancerMetrics, CollectorRegistry, FakeClock]:
    registry = CollectorRegistry()
    clock = FakeClock()
    metrics = BalancerMetrics(registry, limits=lambda c, n: limits, clock=clock)
    return metrics, registry, clock


def bundle_labels(bundle: BundleRange = B0, cluster: str = "east") -> dict[str, str]:
    return {"cluster": cluster, "namespace": NS, "bundle": str(bundle)}


def test_bundle_gauges_come_from_the_latest_snapshot() -> None:
    metrics, registry, _ = make()
    metrics.observe_batch(
        batch_report(
            bundles=[
                load(
                    msg_throughput_in=1000.0,
                    msg_throughput_out=3000.0,
                    topic_count=1500,
                    session_count=40,
                    reported_topics=9,
                    known_topics=12,
                )
            ]
        )
    )
    labels = bundle_labels()
    get = registry.get_sample_value
    assert get("pulsar_balancer_bundle_msg_rate_in", labels) == 100.0
    assert get("pulsar_balancer_bundle_msg_rate_out", labels) == 200.0
    assert get("pulsar_balancer_bundle_msg_throughput_in", labels) == 1000.0
    assert get("pulsar_balancer_bundle_msg_throughput_out", labels) == 3000.0
    assert get("pulsar_balancer_bundle_topics_count", labels) == 1500
    assert get("pulsar_balancer_bundle_sessions_count", labels) == 40
    assert get("pulsar_balancer_bundle_completeness_ratio", labels) == 0.75
    assert get("pulsar_balancer_bundle_threshold_ratio", {**labels, "limit": "topics"}) == 1.5
    assert get("pulsar_balancer_bundle_threshold_ratio", {**labels, "limit": "msg_rate"}) == 0.01
    assert get("pulsar_balancer_bundle_over_threshold", labels) == 1.0


def test_a_split_bundle_disappears_with_the_next_snapshot() -> None:
    metrics, registry, _ = make()
    full = BundleRange.full()
    metrics.observe_batch(batch_report(batch_id=1, bundles=[load(full)]))
    assert registry.get_sample_value("pulsar_balancer_bundle_msg_rate_in", bundle_labels(full))
    metrics.observe_batch(batch_report(batch_id=2, bundles=[load(B0), load(B1)]))
    gone = registry.get_sample_value("pulsar_balancer_bundle_msg_rate_in", bundle_labels(full))
    assert gone is None
    assert registry.get_sample_value("pulsar_balancer_bundle_msg_rate_in", bundle_labels(B1)) == 100
    assert str(full) not in generate_latest(registry).decode()


def test_a_batch_without_bundles_keeps_the_previous_snapshot() -> None:
    metrics, registry, _ = make()
    metrics.observe_batch(batch_report(bundles=[load(B0)]))
    metrics.observe_batch(batch_report(batch_id=2, bundles=()))
    assert registry.get_sample_value("pulsar_balancer_bundle_msg_rate_in", bundle_labels()) == 100


def test_duplicate_bundles_keep_the_latest_window() -> None:
    metrics, registry, _ = make()
    metrics.set_bundle_snapshot(
        [load(msg_rate_in=7.0, window_end_ms=120_000), load(msg_rate_in=1.0, window_end_ms=60_000)]
    )
    assert registry.get_sample_value("pulsar_balancer_bundle_msg_rate_in", bundle_labels()) == 7.0


def test_unknown_limits_give_no_ratio_and_no_over_flag() -> None:
    metrics, registry, _ = make(limits=None)
    metrics.set_bundle_snapshot([load()])
    assert registry.get_sample_value("pulsar_balancer_bundle_msg_rate_in", bundle_labels()) == 100
    over = registry.get_sample_value("pulsar_balancer_bundle_over_threshold", bundle_labels())
    assert over is None
    text = generate_latest(registry).decode()
    assert "pulsar_balancer_bundle_threshold_ratio{" not in text


def test_no_topic_label_anywhere() -> None:
    metrics, registry, _ = make()
    metrics.observe_batch(batch_report(bundles=[load()], kafka_lag={0: 5}))
    for family in registry.collect():
        for sample in family.samples:
            assert "topic" not in sample.labels, sample


def test_a_disabled_limit_has_no_ratio_series() -> None:
    metrics, registry, _ = make(limits=BundleLimits(max_topics=0, max_sessions=-1))
    metrics.set_bundle_snapshot(
        [load(topic_count=5000, msg_throughput_in=1024.0, msg_throughput_out=3072.0)]
    )
    ratios = {
        s.labels["limit"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "pulsar_balancer_bundle_threshold_ratio"
    }
    assert ratios == pytest.approx({"msg_rate": 0.01, "bandwidth": 4096 / (100 * 1024 * 1024)})
    # 5000 topics over a disabled topic limit: not over.
    over = registry.get_sample_value("pulsar_balancer_bundle_over_threshold", bundle_labels())
    assert over == 0.0


@given(
    topics=st.integers(0, 5000),
    sessions=st.integers(0, 5000),
    rate=st.floats(0, 1e6),
)
def test_over_flag_matches_ratios(topics: int, sessions: int, rate: float) -> None:
    metrics, registry, _ = make()
    metrics.set_bundle_snapshot(
        [load(topic_count=topics, session_count=sessions, msg_rate_in=rate, msg_rate_out=0.0)]
    )
    over = registry.get_sample_value("pulsar_balancer_bundle_over_threshold", bundle_labels())
    assert over == (1.0 if topics > 1000 or sessions > 1000 or rate > 30000 else 0.0)


def test_pipeline_metrics_from_batches() -> None:
    metrics, registry, clock = make()
    get = registry.get_sample_value
    assert get("pulsar_balancer_last_batch_timestamp_seconds") == 1_000.0  # start counts
    assert metrics.last_batch_age_s() is None
    clock.now_s = 1_010.0
    metrics.observe_batch(
        batch_report(
            events_consumed=500,
            events_rejected={"bad_json": 3, "unknown_topic": 2, "zero": 0},
            events_late=4,
            kafka_lag={0: 10, 1: 0, 2: -3},
            watermark_delay_s=12.5,
            duration_s=2.0,
        )
    )
    assert get("pulsar_balancer_events_consumed_total") == 500
    assert get("pulsar_balancer_events_rejected_total", {"reason": "bad_json"}) == 3
    assert get("pulsar_balancer_events_rejected_total", {"reason": "unknown_topic"}) == 2
    assert get("pulsar_balancer_events_rejected_total", {"reason": "zero"}) is None
    assert get("pulsar_balancer_events_late_total") == 4
    assert get("pulsar_balancer_kafka_consumer_lag", {"partition": "0"}) == 10
    assert get("pulsar_balancer_kafka_consumer_lag", {"partition": "2"}) == 0  # clamped
    assert get("pulsar_balancer_watermark_delay_seconds") == 12.5
    assert get("pulsar_balancer_batch_duration_seconds_count") == 1
    assert get("pulsar_balancer_batch_duration_seconds_bucket", {"le": "2.0"}) == 1
    assert get("pulsar_balancer_batch_duration_seconds_bucket", {"le": "1.0"}) == 0
    assert get("pulsar_balancer_input_events_per_second") == 250.0  # first: over its duration
    assert get("pulsar_balancer_last_batch_timestamp_seconds") == 1_010.0
    assert get("pulsar_balancer_last_batch_id") == 1
    clock.now_s = 1_020.0
    assert metrics.last_batch_age_s() == 10.0
    metrics.observe_batch(batch_report(batch_id=2, events_consumed=100, kafka_lag={1: 4}))
    assert get("pulsar_balancer_input_events_per_second") == 10.0  # 100 over 10 s since last
    assert get("pulsar_balancer_kafka_consumer_lag", {"partition": "0"}) is None  # fresh set
    assert get("pulsar_balancer_events_consumed_total") == 600


@pytest.mark.parametrize(
    ("result", "children", "counted_children"),
    [("applied", 2, 2), ("decided", 0, None), ("failed", 0, None), ("dry_run", 3, None),
     ("stale", 0, None)],
    ids=["applied", "decided", "failed", "dry-run-creates-nothing", "stale"],
)  # fmt: skip
def test_record_split(result: str, children: int, counted_children: float | None) -> None:
    metrics, registry, _ = make()
    metrics.record_split("east", result, "msg_rate", children=children)
    labels = {"cluster": "east", "result": result, "reason": "msg_rate"}
    assert registry.get_sample_value("pulsar_balancer_splits_total", labels) == 1
    children_total = registry.get_sample_value(
        "pulsar_balancer_split_children_created_total", {"cluster": "east"}
    )
    assert children_total == counted_children


@pytest.mark.parametrize(
    ("result", "nbytes", "counted"),
    [("applied", 4096, 4096), ("started", 4096, None), ("already_running", 0, None),
     ("failed", 0, None), ("dry_run", 100, None), ("nothing_to_offload", 0, None)],
    ids=["applied", "started-moved-nothing-yet", "already-running", "failed",
         "dry-run-moves-nothing", "nothing"],
)  # fmt: skip
def test_record_offload(result: str, nbytes: int, counted: float | None) -> None:
    metrics, registry, _ = make()
    metrics.record_offload("east", result, bytes_offloaded=nbytes)
    assert (
        registry.get_sample_value(
            "pulsar_balancer_offloads_total", {"cluster": "east", "result": result}
        )
        == 1
    )
    assert (
        registry.get_sample_value("pulsar_balancer_offloaded_bytes_total", {"cluster": "east"})
        == counted
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.record_split("east", "exploded", "topics"),
        lambda m: m.record_split("east", "applied", "topics", children=-1),
        lambda m: m.record_offload("east", "maybe"),
        lambda m: m.record_offload("east", "applied", bytes_offloaded=-5),
    ],
    ids=["unknown-split-result", "negative-children", "unknown-offload-result", "negative-bytes"],
)
def test_bad_values_are_clear_errors(call: object) -> None:
    metrics, _, _ = make()
    with pytest.raises(ValueError):
        call(metrics)  # type: ignore[operator]


def test_register_cluster_creates_zero_series() -> None:
    metrics, registry, _ = make()
    metrics.register_cluster("west")
    get = registry.get_sample_value
    assert get("pulsar_balancer_offloads_total", {"cluster": "west", "result": "failed"}) == 0
    assert get("pulsar_balancer_offloaded_bytes_total", {"cluster": "west"}) == 0
    assert get("pulsar_balancer_circuit_breaker_open", {"cluster": "west"}) == 0
    failed = {"cluster": "west", "result": "failed", "reason": "MsgRate"}
    assert get("pulsar_balancer_splits_total", failed) == 0
    metrics.record_split("west", "failed", "MsgRate")
    assert get("pulsar_balancer_splits_total", failed) == 1


def test_state_gauges() -> None:
    metrics, registry, _ = make()
    get = registry.get_sample_value
    metrics.set_breaker("east", True)
    metrics.set_cluster_reachable("east", False)
    metrics.set_cluster_reachable("west", True)
    metrics.set_mode("dry_run")
    metrics.set_mode("apply")
    assert get("pulsar_balancer_circuit_breaker_open", {"cluster": "east"}) == 1
    assert get("pulsar_balancer_cluster_reachable", {"cluster": "east"}) == 0
    assert get("pulsar_balancer_cluster_reachable", {"cluster": "west"}) == 1
    assert get("pulsar_balancer_controller_mode", {"mode": "apply"}) == 1
    assert get("pulsar_balancer_controller_mode", {"mode": "dry_run"}) == 0
    metrics.set_breaker("east", False)
    assert get("pulsar_balancer_circuit_breaker_open", {"cluster": "east"}) == 0


def test_admin_requests() -> None:
    metrics, registry, _ = make()
    metrics.observe_admin_request("east", "put", 204, 0.2)
    metrics.observe_admin_request("east", "PUT", None, 5.0)
    get = registry.get_sample_value
    assert (
        get(
            "pulsar_balancer_admin_requests_total",
            {"cluster": "east", "method": "PUT", "code": "204"},
        )
        == 1
    )
    assert (
        get(
            "pulsar_balancer_admin_requests_total",
            {"cluster": "east", "method": "PUT", "code": "error"},
        )
        == 1
    )
    assert get("pulsar_balancer_admin_request_duration_seconds_count",
               {"cluster": "east", "method": "PUT"}) == 2  # fmt: skip


def test_uses_only_its_own_registry() -> None:
    from prometheus_client import REGISTRY

    before = {m.name for m in REGISTRY.collect()}
    make()
    make()  # two instances on two registries: no duplicate-name clash
    assert {m.name for m in REGISTRY.collect()} == before
    assert not any(n.startswith("pulsar_balancer") for n in before)


def test_snapshot_family_names_are_documented() -> None:
    names = set(snapshot_family_names())
    assert "pulsar_balancer_bundle_threshold_ratio" in names
    assert len(names) == 10


def test_every_metric_is_documented_in_operations_md() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    metrics, registry, _ = make()
    metrics.register_cluster("c")
    metrics.record_split("c", "applied", "topics", children=2)
    metrics.record_move("c", ActionResult.APPLIED, sessions_moved=3)
    metrics.set_pulsar_switch("c", "shedding", True)
    metrics.set_mode("apply")
    metrics.set_cluster_reachable("c", True)
    metrics.observe_admin_request("c", "GET", 200, 0.1)
    metrics.watch_token_files(["c"], lambda: {})
    metrics.observe_batch(batch_report(events_rejected={"bad_json": 1}, kafka_lag={0: 1}))
    metrics.watch_writer_lease(lambda: LeaseStatus(held=True, holder="h:1", detail="held"))
    metrics.watch_drain_marks(lambda: 0, lambda: 0)
    families = {f.name for f in registry.collect() if f.name.startswith("pulsar_balancer_")}
    families |= set(snapshot_family_names())
    documented = {
        name.removesuffix("_total")
        for name in re.findall(r"^\| `(pulsar_balancer_\w+)`", doc, flags=re.MULTILINE)
    }
    assert families == documented


def test_the_event_lag_and_the_late_share_follow_the_batches() -> None:
    metrics, registry, clock = make()
    get = registry.get_sample_value
    assert metrics.late_event_share() is None  # no event yet
    metrics.observe_batch(
        batch_report(events_consumed=100, events_rejected={"bad_json": 20}, events_late=10,
               watermark_ms=1_700_000_000_000, newest_event_ms=1_700_000_060_000)
    )  # fmt: skip
    assert get("pulsar_balancer_event_watermark_lag_seconds") == 60.0
    assert metrics.late_event_share() == 10 / 80  # rejected events are not late ones
    # The poisoned stream of issue 16: the watermark a day ahead, every event late.
    clock.now_s += 60
    metrics.observe_batch(
        batch_report(batch_id=2, events_consumed=400, events_late=400,
               watermark_ms=1_700_086_400_000, newest_event_ms=1_700_000_120_000)
    )  # fmt: skip
    assert get("pulsar_balancer_event_watermark_lag_seconds") == -86_280.0
    assert metrics.late_event_share() == 410 / 480
    metrics.observe_batch(batch_report(batch_id=3))  # no event: the lag keeps its last value
    assert get("pulsar_balancer_event_watermark_lag_seconds") == -86_280.0
    clock.now_s += 600  # the first batch leaves the span; the second is at its edge
    assert metrics.late_event_share() == 1.0
    clock.now_s += 1
    assert metrics.late_event_share() is None


def test_lone_hot_topics_are_a_gauge_replaced_each_window() -> None:
    from balancer.core.partitions import LoneHotTopic

    metrics, registry, _ = make()
    hot = LoneHotTopic(
        cluster="east",
        namespace="acme/orders",
        topic="persistent://acme/orders/big",
        hot_topic="persistent://acme/orders/big-partition-1",
        bundle="0x00000000_0x40000000",
        msg_rate=40_000.0,
        throughput_bytes=0.0,
        current_partitions=2,
        recommended_partitions=4,
    )
    name = "pulsar_balancer_lone_hot_topic_recommended_partitions"
    labels = {"cluster": "east", "namespace": "acme/orders", "topic": hot.topic}
    metrics.set_lone_hot_topics([hot])
    assert registry.get_sample_value(name, labels) == 4
    metrics.set_lone_hot_topics([])  # fixed: the series vanishes, the alert resolves
    assert registry.get_sample_value(name, labels) is None


def test_a_token_file_problem_is_a_gauge_per_cluster() -> None:
    metrics, registry, _ = make()
    problems = {"east": "token file /run/east.token was deleted"}
    metrics.watch_token_files(["east", "west"], lambda: problems)
    name = "pulsar_balancer_token_file_problem"
    assert registry.get_sample_value(name, {"cluster": "east"}) == 1
    assert registry.get_sample_value(name, {"cluster": "west"}) == 0
    problems.clear()  # restored: read again on the next scrape
    assert registry.get_sample_value(name, {"cluster": "east"}) == 0


def test_skipped_kafka_offsets_are_counted_by_reason() -> None:
    metrics, registry, _ = make()
    name = "pulsar_balancer_kafka_offsets_skipped_total"
    assert registry.get_sample_value(name, {"reason": "partition_gone"}) == 0  # from the start
    metrics.observe_batch(batch_report(offsets_skipped={"partition_gone": 5, "records_lost": 2}))
    metrics.observe_batch(batch_report(offsets_skipped={"partition_gone": 1}))
    assert registry.get_sample_value(name, {"reason": "partition_gone"}) == 6
    assert registry.get_sample_value(name, {"reason": "records_lost"}) == 2


def test_moves_count_by_result_with_their_sessions() -> None:
    metrics, registry, _ = make()
    metrics.register_cluster("c")
    get = registry.get_sample_value
    assert get("pulsar_balancer_moves_total", {"cluster": "c", "result": "landed_elsewhere"}) == 0
    metrics.record_move("c", ActionResult.LANDED_ELSEWHERE, sessions_moved=7)
    metrics.record_move("c", ActionResult.UNKNOWN)
    assert get("pulsar_balancer_moves_total", {"cluster": "c", "result": "landed_elsewhere"}) == 1
    assert get("pulsar_balancer_moved_sessions_total", {"cluster": "c"}) == 7
    with pytest.raises(ValueError):
        metrics.record_move("c", ActionResult.STARTED)  # an offload's result
    metrics.set_pulsar_switch("c", "auto_split", False)
    assert (
        get("pulsar_balancer_pulsar_switch_enabled", {"cluster": "c", "switch": "auto_split"}) == 0
    )
    with pytest.raises(ValueError):
        metrics.set_pulsar_switch("c", "anything", True)
    metrics.record_pulsar_config_error("c")
    assert get("pulsar_balancer_pulsar_config_errors_total", {"cluster": "c"}) == 1


def test_roll_in_progress_is_0_from_registration_and_1_while_a_roll_is_open() -> None:
    metrics, registry, _ = make()
    metrics.register_cluster("west")
    labels = {"cluster": "west"}
    assert registry.get_sample_value("pulsar_balancer_roll_in_progress", labels) == 0
    metrics.set_roll_in_progress("west", True)
    assert registry.get_sample_value("pulsar_balancer_roll_in_progress", labels) == 1
    metrics.set_roll_in_progress("west", False)
    assert registry.get_sample_value("pulsar_balancer_roll_in_progress", labels) == 0
