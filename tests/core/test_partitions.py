"""Lone hot topics and the partition count that brings each partition under the fill target."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.bundles import BundleRange
from balancer.core.hashing import hash_position
from balancer.core.limits import MIB_BYTES, BundleLimits
from balancer.core.load import TopicLoad, roll_up
from balancer.core.partitions import lone_hot_topics, recommended_partitions

LIMITS = BundleLimits(max_msg_rate=1000.0, max_bandwidth_mbytes=10.0)

rates = st.floats(min_value=0.0, max_value=1e7, allow_nan=False)
fills = st.floats(min_value=0.05, max_value=1.0)
limits = st.builds(
    BundleLimits,
    max_msg_rate=st.sampled_from([0.0, 1.0, 500.0, 30_000.0]),
    max_bandwidth_mbytes=st.sampled_from([0.0, 0.5, 100.0]),
)


def under(total: float, count: int, limit: float, fill: float) -> bool:
    return limit <= 0 or total / count <= limit * fill


@given(
    current=st.integers(min_value=0, max_value=500),
    rate=rates,
    throughput=rates,
    lim=limits,
    fill=fills,
)
def test_every_partition_ends_under_the_fill_target_with_the_fewest_partitions(
    current: int, rate: float, throughput: float, lim: BundleLimits, fill: float
) -> None:
    n = recommended_partitions(
        current_partitions=current,
        total_msg_rate=rate,
        total_throughput_bytes=throughput,
        limits=lim,
        fill_factor=fill,
    )
    assert n >= max(1, current)  # Pulsar can only add partitions
    assert under(rate, n, lim.max_msg_rate, fill)
    assert under(throughput, n, lim.max_bandwidth_bytes, fill)
    if n > max(1, current):  # minimal: one fewer leaves some partition over the target
        assert not (
            under(rate, n - 1, lim.max_msg_rate, fill)
            and under(throughput, n - 1, lim.max_bandwidth_bytes, fill)
        )


def test_examples() -> None:
    # 9,000 msg/s against a 1,000 msg/s limit at 0.8: 1,125 msg/s each needs 12 partitions.
    assert (
        recommended_partitions(
            current_partitions=0,
            total_msg_rate=9000,
            total_throughput_bytes=0,
            limits=LIMITS,
            fill_factor=0.8,
        )
        == 12
    )
    # Bandwidth decides when it is the tighter limit: 80 MiB/s over 8 MiB/s targets.
    assert (
        recommended_partitions(
            current_partitions=4,
            total_msg_rate=100,
            total_throughput_bytes=80 * MIB_BYTES,
            limits=LIMITS,
            fill_factor=0.8,
        )
        == 10
    )


@pytest.mark.parametrize("fill", [0.0, -1.0, 1.5])
def test_bad_fill_factor_is_refused(fill: float) -> None:
    with pytest.raises(ValueError, match="fill_factor"):
        recommended_partitions(
            current_partitions=1,
            total_msg_rate=1,
            total_throughput_bytes=1,
            limits=LIMITS,
            fill_factor=fill,
        )


def load(topic: str, rate: float) -> TopicLoad:
    return TopicLoad(topic=topic, position=hash_position(topic), msg_rate_in=rate)


def test_lone_hot_partition_counts_partitions_across_bundles() -> None:
    base = "persistent://acme/orders/t"
    hot = load(f"{base}-partition-2", 1500.0)
    other = [load(f"{base}-partition-{i}", 100.0) for i in (0, 1, 3)]
    quiet = load("persistent://acme/orders/q", 10.0)
    b1 = roll_up(
        cluster="east",
        namespace="acme/orders",
        bundle=BundleRange(0, 2**31),
        window_end_ms=1,
        topics=(hot, quiet),
    )
    b2 = roll_up(
        cluster="east",
        namespace="acme/orders",
        bundle=BundleRange(2**31, 0xFFFFFFFF),
        window_end_ms=1,
        topics=tuple(other),
    )
    [found] = lone_hot_topics([b1, b2], limits_for=lambda ns: LIMITS, fill_factor=0.8)
    assert found.topic == base and found.hot_topic == hot.topic
    assert found.current_partitions == 4
    # 1,800 msg/s in total over an 800 msg/s target: 3 partitions would do, but 4 exist.
    assert found.recommended_partitions == 4
    assert found.skewed  # the count is enough: partition 2 carries more than its share
    assert found.bundle == str(b1.bundle)


def test_lone_non_partitioned_topic() -> None:
    hot = load("persistent://acme/orders/big", 2500.0)
    b = roll_up(
        cluster="east",
        namespace="acme/orders",
        bundle=BundleRange(0, 0xFFFFFFFF),
        window_end_ms=1,
        topics=(hot,),
    )
    [found] = lone_hot_topics([b], limits_for=lambda ns: LIMITS, fill_factor=0.8)
    assert found.current_partitions == 0
    assert found.recommended_partitions == 4  # 2,500 / 800 -> 4
    assert not found.skewed


def test_no_lone_topic_when_the_load_is_spread() -> None:
    topics = tuple(load(f"persistent://acme/orders/t{i}", 300.0) for i in range(5))
    b = roll_up(
        cluster="east",
        namespace="acme/orders",
        bundle=BundleRange(0, 0xFFFFFFFF),
        window_end_ms=1,
        topics=topics,
    )
    assert lone_hot_topics([b], limits_for=lambda ns: LIMITS, fill_factor=0.8) == []
