"""A broker's load: Pulsar's weighted max of resource usages, windowed, and the fallback."""

from __future__ import annotations

import pytest

from balancer.core.broker_load import (
    BrokerCapacity,
    BrokerLoadReport,
    LoadSource,
    LoadWeights,
    Resource,
    ResourceUsage,
    broker_load_from_bundles,
    broker_load_from_reports,
    bundle_load_ratio,
    load_ratio,
)
from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad

B1 = BundleRange(0, 0x80000000)
B2 = BundleRange(0x80000000, 0xFFFFFFFF)


def usages(**ratios: tuple[float, float]) -> dict[Resource, ResourceUsage]:
    return {Resource(k): ResourceUsage(u, lim) for k, (u, lim) in ratios.items()}


def report(ts: int, cpu: float, bw_in: float, **kw: object) -> BrokerLoadReport:
    return BrokerLoadReport(
        cluster="c",
        broker="b1:8080",
        timestamp_ms=ts,
        resources={
            Resource.CPU: ResourceUsage(cpu, 400.0),
            Resource.BANDWIDTH_IN: ResourceUsage(bw_in, 1000.0),
        },
        **kw,  # type: ignore[arg-type]
    )


def test_load_ratio_is_the_weighted_max() -> None:
    res = usages(cpu=(200.0, 400.0), bandwidthIn=(300.0, 1000.0), memory=(900.0, 1000.0))
    # memory weighs 1.0 by default (ServiceConfiguration's default, still counted): 0.9
    assert load_ratio(res, LoadWeights()) == pytest.approx(0.9)
    assert load_ratio(res, LoadWeights(memory=0.0)) == pytest.approx(0.5)
    assert load_ratio(res, LoadWeights(cpu=0.5, memory=0.0)) == pytest.approx(0.3)


def test_load_ratio_unknown_limit_and_empty() -> None:
    assert load_ratio(usages(cpu=(50.0, 0.0)), LoadWeights()) == 0.0
    assert load_ratio({}, LoadWeights()) == 0.0


def test_from_reports_averages_usages_then_takes_the_max() -> None:
    # cpu 0.2 then 0.6 (avg 0.4); bandwidth in 0.5 then 0.1 (avg 0.3): the max of the
    # averages is 0.4, not the average of the per-report maxima (0.55)
    reports = [report(1, 80.0, 500.0), report(2, 240.0, 100.0)]
    load = broker_load_from_reports(reports, [], weights=LoadWeights(), window_end_ms=10)
    assert load.load_ratio == pytest.approx(0.4)
    assert load.resource_ratios[Resource.BANDWIDTH_IN] == pytest.approx(0.3)
    assert (load.source, load.samples, load.broker, load.window_end_ms) == (
        LoadSource.LOAD_REPORT,
        2,
        "b1:8080",
        10,
    )


def test_from_reports_takes_rates_from_bundles_when_given() -> None:
    bundles = [
        BundleLoad("c", "t/ns", B1, 10, 1.0, 2.0, 10.0, 20.0, topic_count=3),
        BundleLoad("c", "t/ns", B2, 10, 3.0, 4.0, 30.0, 40.0, topic_count=4),
    ]
    reports = [report(1, 80.0, 0.0, msg_rate_in=999.0, num_bundles=9, num_topics=99)]
    load = broker_load_from_reports(reports, bundles, weights=LoadWeights(), window_end_ms=10)
    assert (load.msg_rate, load.throughput_bytes) == (10.0, 100.0)
    assert (load.bundle_count, load.topic_count) == (2, 7)


def test_from_reports_falls_back_to_the_reports_figures() -> None:
    reports = [
        report(
            2,
            0.0,
            0.0,
            msg_rate_in=10.0,
            msg_rate_out=20.0,
            msg_throughput_in=100.0,
            num_bundles=5,
            num_topics=50,
        ),
        report(
            1,
            0.0,
            0.0,
            msg_rate_in=30.0,
            msg_rate_out=40.0,
            msg_throughput_out=300.0,
            num_bundles=4,
            num_topics=40,
        ),
    ]
    load = broker_load_from_reports(reports, [], weights=LoadWeights(), window_end_ms=10)
    assert load.msg_rate == pytest.approx(50.0)
    assert load.throughput_bytes == pytest.approx(200.0)
    assert (load.bundle_count, load.topic_count) == (5, 50)  # the newest report's counts


def test_from_reports_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one"):
        broker_load_from_reports([], [], weights=LoadWeights(), window_end_ms=0)
    other = BrokerLoadReport("c", "b2:8080", 1, {})
    with pytest.raises(ValueError, match="more than one broker"):
        broker_load_from_reports(
            [report(1, 0, 0), other], [], weights=LoadWeights(), window_end_ms=0
        )


def test_from_bundles_against_capacity() -> None:
    bundles = [
        BundleLoad("c", "t/ns", B1, 10, 100.0, 100.0, 1e6, 0.0, topic_count=2),
        BundleLoad("c", "t/ns", B2, 10, 50.0, 50.0, 2e6, 1e6, topic_count=1),
    ]
    cap = BrokerCapacity(max_msg_rate=1000.0, max_throughput_bytes=10e6)
    load = broker_load_from_bundles("c", "b1:8080", bundles, capacity=cap, window_end_ms=10)
    # msg rate 300 / 1000 = 0.3 < throughput 4 MB/s / 10 MB/s = 0.4
    assert load.load_ratio == pytest.approx(0.4)
    assert (load.source, load.samples, load.bundle_count, load.topic_count) == (
        LoadSource.BUNDLES,
        0,
        2,
        3,
    )
    empty = broker_load_from_bundles("c", "b", [], capacity=cap, window_end_ms=10)
    assert empty.load_ratio == 0.0


def test_bundle_load_ratio_unknown_capacity() -> None:
    assert bundle_load_ratio(10.0, 10.0, BrokerCapacity(0.0, 0.0)) == 0.0
    assert bundle_load_ratio(10.0, 10.0, BrokerCapacity(100.0, 0.0)) == pytest.approx(0.1)
