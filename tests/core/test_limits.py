"""Load against limits: ratios, over, the disabled limit, and agreement between them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.bundles import BundleRange
from balancer.core.decisions import REASON_FOR_LIMIT, REASON_PRIORITY
from balancer.core.limits import (
    LIMIT_PRIORITY,
    MIB_BYTES,
    BundleLimits,
    Limit,
    LoadTotals,
    is_near,
    is_over,
    load_on,
    max_ratio,
    over_limits,
    ratios,
)
from balancer.core.load import BundleLoad

MIB = 1024 * 1024


def bundle(**kw: float) -> BundleLoad:
    """A bundle of 10 topics, 20 sessions, 300 msg/s and 4096 bytes/s, or as `kw` says."""
    figures = {"topic_count": 10, "session_count": 20, "msg_rate_in": 300.0} | kw
    return BundleLoad(
        "east", "acme/orders", BundleRange(0, 0x40000000), 60_000,
        msg_throughput_in=figures.pop("msg_throughput_in", 4096.0),
        topic_count=int(figures.pop("topic_count")),
        session_count=int(figures.pop("session_count")),
        **figures,
    )  # fmt: skip


def test_defaults_are_pulsars() -> None:
    limits = BundleLimits()
    assert limits.enabled() == {
        Limit.TOPICS: 1000.0,
        Limit.SESSIONS: 1000.0,
        Limit.MSG_RATE: 30_000.0,
        Limit.BANDWIDTH: 100.0 * MIB,
    }
    assert MIB_BYTES == MIB
    assert [limit.value for limit in LIMIT_PRIORITY] == [
        "topics",
        "sessions",
        "msg_rate",
        "bandwidth",
    ]


def test_ratios_of_a_bundle_in_and_out() -> None:
    assert ratios(bundle(), BundleLimits()) == pytest.approx(
        {
            Limit.TOPICS: 0.01,
            Limit.SESSIONS: 0.02,
            Limit.MSG_RATE: 0.01,
            Limit.BANDWIDTH: 4096 / (100 * MIB),
        }
    )
    assert max_ratio(bundle(), BundleLimits()) == pytest.approx(0.02)


@pytest.mark.parametrize("disabled", [0, -1])
def test_a_limit_at_or_below_zero_is_disabled(disabled: int) -> None:
    limits = BundleLimits(max_topics=disabled, max_sessions=disabled)
    heavy = bundle(topic_count=10**6, session_count=10**6)
    assert set(ratios(heavy, limits)) == {Limit.MSG_RATE, Limit.BANDWIDTH}
    assert over_limits(heavy, limits) == ()
    assert not is_over(heavy, limits)


def test_every_limit_disabled_gives_ratio_zero_and_never_over() -> None:
    limits = BundleLimits(max_topics=0, max_sessions=0, max_msg_rate=0, max_bandwidth_mbytes=0)
    load = bundle(topic_count=10**6, msg_rate_in=1e9)
    assert ratios(load, limits) == {}
    assert max_ratio(load, limits) == 0.0
    assert not is_over(load, limits)


def test_over_is_strict_and_in_priority_order() -> None:
    limits = BundleLimits()
    at_limits = bundle(
        topic_count=1000, session_count=1000, msg_rate_in=30_000, msg_throughput_in=100 * MIB
    )
    assert over_limits(at_limits, limits) == ()  # at a limit is not over it (Pulsar's `>`)
    over_all = bundle(
        topic_count=1001, session_count=1001, msg_rate_in=30_001, msg_throughput_in=100 * MIB + 1
    )
    assert over_limits(over_all, limits) == LIMIT_PRIORITY


def test_load_totals_leave_the_axes_they_do_not_set_at_zero() -> None:
    hot_topic = LoadTotals(msg_rate=40_000.0)
    assert over_limits(hot_topic, BundleLimits()) == (Limit.MSG_RATE,)
    assert load_on(hot_topic, Limit.TOPICS) == 0.0


def test_split_reasons_follow_the_limits_in_the_same_order() -> None:
    assert tuple(REASON_FOR_LIMIT) == LIMIT_PRIORITY
    reasons = [REASON_FOR_LIMIT[limit] for limit in LIMIT_PRIORITY]
    assert reasons == list(REASON_PRIORITY[: len(reasons)])


limit_values = st.one_of(st.just(0), st.integers(-5, 5000))
flow_limits = st.one_of(st.just(0.0), st.floats(-5.0, 1e6, allow_nan=False))
loads = st.builds(
    LoadTotals,
    topic_count=st.integers(0, 10_000),
    session_count=st.integers(0, 10_000),
    msg_rate=st.floats(0.0, 1e7, allow_nan=False),
    throughput_bytes=st.floats(0.0, 1e12, allow_nan=False),
)
limit_sets = st.builds(
    BundleLimits,
    max_topics=limit_values,
    max_sessions=limit_values,
    max_msg_rate=flow_limits,
    max_bandwidth_mbytes=flow_limits,
)


@given(load=loads, limits=limit_sets)
def test_ratios_agree_with_over(load: LoadTotals, limits: BundleLimits) -> None:
    by_limit = ratios(load, limits)
    over = over_limits(load, limits)
    assert set(by_limit) == set(limits.enabled())
    assert set(over) <= set(by_limit)  # a disabled limit is never over
    for limit, ratio in by_limit.items():
        if ratio > 1.0:
            assert limit in over
        if limit in over:
            assert ratio >= 1.0  # exactly 1.0 only where float rounding hides the excess
    assert is_over(load, limits) == bool(over)
    assert max_ratio(load, limits) == max(by_limit.values(), default=0.0)


@given(load=loads, limits=limit_sets, min_ratio=st.floats(0, 1))
def test_near_is_over_or_at_least_the_ratio(
    load: LoadTotals, limits: BundleLimits, min_ratio: float
) -> None:
    near = is_near(load, limits, min_ratio)
    assert near == (
        is_over(load, limits) or (min_ratio > 0 and max_ratio(load, limits) >= min_ratio)
    )
    assert is_near(load, limits, 1.0) == (is_over(load, limits) or max_ratio(load, limits) >= 1.0)
    if is_over(load, limits):
        assert near  # a bundle over a limit always brings its topics


def test_near_at_ninety_percent_of_the_msg_rate_limit() -> None:
    limits = BundleLimits(max_topics=0, max_sessions=0, max_msg_rate=1000.0, max_bandwidth_mbytes=0)
    assert not is_near(LoadTotals(msg_rate=899.0), limits, 0.9)
    assert is_near(LoadTotals(msg_rate=900.0), limits, 0.9)
    assert is_near(LoadTotals(msg_rate=1001.0), limits, 1.0)
    assert not is_near(LoadTotals(msg_rate=1000.0), limits, 0.0)  # 0: over only


@given(load=loads, limits=limit_sets, limit=st.sampled_from(Limit))
def test_disabling_a_limit_drops_it_and_only_it(
    load: LoadTotals, limits: BundleLimits, limit: Limit
) -> None:
    field = {
        Limit.TOPICS: "max_topics",
        Limit.SESSIONS: "max_sessions",
        Limit.MSG_RATE: "max_msg_rate",
        Limit.BANDWIDTH: "max_bandwidth_mbytes",
    }[limit]
    disabled = replace(limits, **{field: 0})
    assert limit not in ratios(load, disabled)
    assert limit not in over_limits(load, disabled)
    kept = {k: v for k, v in ratios(load, limits).items() if k is not limit}
    assert ratios(load, disabled) == kept


@given(
    topics=st.integers(0, 5000),
    sessions=st.integers(0, 5000),
    rate=st.floats(0.0, 1e6, allow_nan=False),
)
def test_a_bundle_load_reads_like_its_totals(topics: int, sessions: int, rate: float) -> None:
    load = bundle(topic_count=topics, session_count=sessions, msg_rate_in=rate)
    totals = LoadTotals(topics, sessions, load.msg_rate, load.throughput_bytes)
    assert ratios(load, BundleLimits()) == ratios(totals, BundleLimits())
    assert over_limits(load, BundleLimits()) == over_limits(totals, BundleLimits())
