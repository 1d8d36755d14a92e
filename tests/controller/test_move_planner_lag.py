"""Loads that lag (issue 41 point 7): a load report's `lastUpdate` is when the broker last
wrote it to the metadata store (ModularLoadManagerImpl.writeBrokerDataOnZooKeeper), not when
it was made, and its cpu and bandwidth are the average over the minute before the last
sample (LinuxBrokerHostUsageImpl, every loadBalancerHostUsageCheckIntervalMinutes). The
planner times reports by its own poll, and keeps a move's projected effect until a report
polled late enough to show none of the old load."""

from __future__ import annotations

from collections.abc import Mapping

from balancer.controller.broker_board import BrokerLoadBoard, BrokerSample
from balancer.controller.move_planning import MovePlanner, RulesCache
from balancer.core.broker_load import (
    USAGE_INTERVAL_MS,
    BrokerCapacity,
    BrokerLoadReport,
    Resource,
    ResourceUsage,
)
from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad
from balancer.core.moves.model import IsolationPolicy, MoveSettings
from balancer.pulsar.broker_models import parse_load_report

NS = "t/ns"
RANGES = [BundleRange(i * 0x10000000, (i + 1) * 0x10000000) for i in range(8)]
CAPACITY = BrokerCapacity(max_msg_rate=100_000.0, max_throughput_bytes=1e12)


class NoRules:
    def isolation_policies(self, cluster: str) -> tuple[IsolationPolicy, ...]:
        return ()

    def failure_domains(self, cluster: str) -> Mapping[str, tuple[str, ...]]:
        return {}

    def anti_affinity_group(self, namespace: str, *, cluster: str | None = None) -> str | None:
        return None

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        return {}


def report(broker: str, cpu_ratio: float, msg_rate: float, last_update_ms: int) -> BrokerLoadReport:
    return BrokerLoadReport(
        cluster="c",
        broker=broker,
        timestamp_ms=last_update_ms,  # what the parser put there before issue 41
        resources={Resource.CPU: ResourceUsage(cpu_ratio * 800.0, 800.0)},
        msg_rate_in=msg_rate / 2,
        msg_rate_out=msg_rate / 2,
    )


def bundle(i: int, end_ms: int, rate: float = 10_000.0) -> BundleLoad:
    return BundleLoad(
        cluster="c",
        namespace=NS,
        bundle=RANGES[i],
        window_end_ms=end_ms,
        msg_rate_in=rate / 2,
        msg_rate_out=rate / 2,
        topic_count=1,
        session_count=2,
    )


def test_the_parser_times_a_report_by_its_read_not_its_store_write() -> None:
    body = {"cpu": {"usage": 10.0, "limit": 100.0}, "lastUpdate": 1_000}
    for key in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut"):
        body[key] = 0.0
    for key in ("numTopics", "numBundles", "numProducers", "numConsumers"):
        body[key] = 0
    parsed = parse_load_report(body, cluster="c", broker="a:8080", read_at_ms=900_000)
    assert parsed.timestamp_ms == 900_000
    assert parsed.last_update_ms == 1_000


def test_the_board_times_a_report_by_the_poll_that_read_it() -> None:
    board = BrokerLoadBoard(retain_ms=600_000)
    board.record(BrokerSample("c", "a:1", 120_000, report("a:1", 0.5, 0.0, 5_000), frozenset()))
    [window] = board.window("c", start_ms=60_000, end_ms=180_000)
    assert [r.timestamp_ms for r in window.reports] == [120_000]


def test_a_moves_projection_holds_until_a_report_polled_after_the_usage_lag() -> None:
    board = BrokerLoadBoard(retain_ms=3_600_000)
    planner = MovePlanner(
        board,
        RulesCache(NoRules(), ttl_s=60, max_topics_per_broker=50_000, monotonic=lambda: 0.0),
        settings=MoveSettings(grace_period_s=0),
        capacity_of=lambda c, b: CAPACITY,
        window_s=60,
        last_moves_ms=lambda c: {},
    )

    def poll(at_ms: int, owners: dict[str, list[int]], usage: dict[str, float]) -> None:
        for broker, idx in owners.items():
            # lastUpdate: the store write the bundle count change triggered just after t0
            written = report(broker, usage[broker], 10_000.0 * len(idx), t0 + 5_000)
            owned = frozenset(f"{NS}/{RANGES[i]}" for i in idx)
            board.record(BrokerSample("c", broker, at_ms, written, owned))

    # a:1 owns 6 bundles of 10k msg/s (0.6 busy), b:1 owns 2 (0.2).
    t0 = 600_000
    before = {"a:1": [0, 1, 2, 3, 4, 5], "b:1": [6, 7]}
    poll(t0, before, {"a:1": 0.6, "b:1": 0.2})
    bundles = [bundle(i, t0) for i in range(8)]
    first = planner.plan("c", bundles, window_end_ms=t0, now_ms=t0)
    assert first is not None and first.moves
    moved = {RANGES.index(m.bundle) for m in first.moves}
    after = {"a:1": [i for i in before["a:1"] if i not in moved], "b:1": [6, 7, *moved]}

    # The first poll after the moves: ownership shows them, the usage does not yet (the
    # broker's last sample averages the minute before the unload). No second round.
    t1 = t0 + USAGE_INTERVAL_MS
    poll(t1, after, {"a:1": 0.6, "b:1": 0.2})
    second = planner.plan("c", bundles, window_end_ms=t1, now_ms=t1)
    assert second is not None
    assert second.moves == (), [(m.bundle, m.source, m.destination) for m in second.moves]
    assert second.loads_before == first.loads_after

    # Two intervals after the unload every sample is of the new layout: the reports count.
    t2 = t0 + 2 * USAGE_INTERVAL_MS
    poll(t2, after, {"a:1": 0.41, "b:1": 0.39})
    third = planner.plan("c", bundles, window_end_ms=t2, now_ms=t2)
    assert third is not None and third.moves == ()
    assert third.loads_before["a:1"] == 0.41


def test_measured_and_guessed_brokers_are_never_compared_in_one_plan() -> None:
    # issue 41 point 10: b:1 has no report (its load would be its bundles against the
    # configured capacity): a:1's measured 0.9 is not compared with that guess.
    board = BrokerLoadBoard(retain_ms=3_600_000)
    planner = MovePlanner(
        board,
        RulesCache(NoRules(), ttl_s=60, max_topics_per_broker=50_000, monotonic=lambda: 0.0),
        settings=MoveSettings(grace_period_s=0),
        capacity_of=lambda c, b: CAPACITY,
        window_s=60,
        last_moves_ms=lambda c: {},
    )
    t0 = 600_000
    owned_a = frozenset(f"{NS}/{RANGES[i]}" for i in range(6))
    board.record(BrokerSample("c", "a:1", t0, report("a:1", 0.9, 60_000.0, 0), owned_a))
    board.record(BrokerSample("c", "b:1", t0, None, frozenset({f"{NS}/{RANGES[6]}"})))
    bundles = [bundle(i, t0) for i in range(7)]
    assert planner.plan("c", bundles, window_end_ms=t0, now_ms=t0) is None
    assert planner.unmeasured == {"c": ("b:1",)}
    # Once b:1 is measured too, the cluster is planned again.
    board.record(
        BrokerSample(
            "c", "b:1", t0 + 1, report("b:1", 0.1, 10_000.0, 0), frozenset({f"{NS}/{RANGES[6]}"})
        )
    )
    plan = planner.plan("c", bundles, window_end_ms=t0, now_ms=t0 + 2)
    assert plan is not None and plan.moves
    assert planner.unmeasured == {"c": ()}
