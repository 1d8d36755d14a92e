"""Pulsar's split strategies as its source has them: the extensible one's hit count, cap and
one-boundary rule; the modular one's long-term rates."""

from __future__ import annotations

from collections.abc import Sequence

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.limits import Limit
from balancer.core.load import BundleLoad
from balancer.core.replay.pulsar_splits import (
    ExtensibleSplitStrategy,
    ModularSplitStrategy,
)

LIMIT = 30_000.0  # loadBalancerNamespaceBundleMaxMsgRate


def load(bundle: BundleRange, msg_rate: float, *, topics: int = 10, ns: str = "t/ns") -> BundleLoad:
    return BundleLoad(
        cluster="c",
        namespace=ns,
        bundle=bundle,
        window_end_ms=0,
        msg_rate_in=msg_rate / 2,
        msg_rate_out=msg_rate / 2,
        topic_count=topics,
        reported_topics=topics,
        known_topics=topics,
    )


def middle(b: BundleLoad) -> Sequence[int]:
    return (b.bundle.lower + b.bundle.width // 2,)


B1, B2 = NamespaceBundles.initial("t/ns", 2).bundles


def test_extensible_splits_on_the_4th_consecutive_check_over_and_counts_again() -> None:
    s = ExtensibleSplitStrategy()
    hot = [load(B1, 2 * LIMIT)]
    assert [s.cycle(hot, {"t/ns": 2}, middle) for _ in range(3)] == [[], [], []]
    (choice,) = s.cycle(hot, {"t/ns": 2}, middle)
    assert choice.key == B1.key("t/ns") and choice.reason is Limit.MSG_RATE
    assert choice.boundaries == tuple(middle(hot[0]))
    assert s.cycle(hot, {"t/ns": 3}, middle) == []  # the count starts again


def test_extensible_one_check_under_resets_the_count() -> None:
    s = ExtensibleSplitStrategy()
    hot, calm = [load(B1, 2 * LIMIT)], [load(B1, LIMIT / 2)]
    for loads in (hot, hot, hot, calm, hot, hot, hot):
        assert s.cycle(loads, {"t/ns": 2}, middle) == []
    assert s.cycle(hot, {"t/ns": 2}, middle)


def test_extensible_keeps_the_count_when_the_algorithm_finds_no_single_boundary() -> None:
    # DefaultNamespaceBundleSplitStrategyImpl: "The size of split boundaries is not 1" is a
    # failure that leaves splitConditionHitCounts alone: the next check splits at once.
    s = ExtensibleSplitStrategy()
    hot = [load(B1, 2 * LIMIT)]
    for _ in range(3):
        s.cycle(hot, {"t/ns": 2}, middle)
    assert s.cycle(hot, {"t/ns": 2}, lambda b: ()) == []
    assert s.cycle(hot, {"t/ns": 2}, lambda b: (1, 2)) == []
    assert s.cycle(hot, {"t/ns": 2}, middle)


def test_extensible_never_splits_a_lone_topic_nor_past_128_bundles() -> None:
    s = ExtensibleSplitStrategy()
    lone, full = load(B1, 3 * LIMIT, topics=1), load(B2, 3 * LIMIT)
    for _ in range(6):
        assert s.cycle([lone, full], {"t/ns": 128}, middle) == []
    assert B1.key("t/ns") not in s.hits  # a lone topic is not even counted
    assert s.cycle([full], {"t/ns": 127}, middle)  # the count was kept at the limit


def test_extensible_splits_at_most_10_bundles_a_check_heaviest_given_first() -> None:
    layout = NamespaceBundles.initial("t/ns", 16)
    loads = [load(b, (2 + i) * LIMIT) for i, b in enumerate(layout.bundles)][::-1]
    s = ExtensibleSplitStrategy()
    for _ in range(3):
        s.cycle(loads, {"t/ns": 16}, middle)
    chosen = s.cycle(loads, {"t/ns": 16}, middle)
    assert [c.load for c in chosen] == loads[:10]
    # The 6 left were not visited after the cap: their count stays at 3.
    assert all(s.hits[b.bundle.key("t/ns")] == 3 for b in loads[10:])


def test_modular_reads_long_term_rates_so_a_sudden_overload_waits() -> None:
    s = ModularSplitStrategy()
    calm, hot = [load(B1, 0.3 * LIMIT)], [load(B1, 2 * LIMIT)]
    for _ in range(10):
        assert s.cycle(calm, {"t/ns": 2}, middle) == []
    # The running mean of 10 x 0.3 and k x 2.0 passes 1.0 at k = 8 (3 + 2k > 10 + k).
    waited = 0
    while not s.cycle(hot, {"t/ns": 2}, middle):
        waited += 1
    assert waited == 7
    # The split drops the parent's data; a child starts from its first sample.
    assert B1.key("t/ns") not in s.long_term


def test_modular_splits_on_topics_at_once_and_every_bundle_over_in_one_check() -> None:
    s = ModularSplitStrategy()
    many = [load(b, 0.0, topics=1001) for b in NamespaceBundles.initial("t/ns", 20).bundles]
    chosen = s.cycle(many, {"t/ns": 20}, middle)
    assert len(chosen) == 20 and {c.reason for c in chosen} == {Limit.TOPICS}
    assert len(s.cycle(many, {"t/ns": 120}, middle)) == 8  # up to 128 bundles
