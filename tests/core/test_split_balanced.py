"""balanced_flow_divide: fewest children under target, the heaviest child as light as possible,
checked on examples and against a brute-force reference on small bundles."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.bundles import BundleRange
from balancer.core.hashing import FULL_UPPER
from balancer.core.load import TopicLoad
from balancer.core.split import (
    SplitAlgorithm,
    SplitError,
    SplitOptions,
    SplitResult,
    balanced_flow_divide,
    compute_split,
)

FULL = BundleRange.full()
MIB = 1024 * 1024
BALANCED = SplitAlgorithm.BALANCED_FLOW_DIVIDE
TOLERANCE = 1e-9


def topic(
    position: int, rate: float = 0.0, throughput: float = 0.0, sessions: int = 0
) -> TopicLoad:
    return TopicLoad(
        f"persistent://t/ns/x{position}-{rate}",
        position,
        msg_rate_in=rate,
        msg_throughput_in=throughput,
        producer_count=sessions,
    )


def split(
    topics: Sequence[TopicLoad], bundle: BundleRange = FULL, **options: object
) -> SplitResult:
    return compute_split(BALANCED, bundle, topics, SplitOptions(**options))  # type: ignore[arg-type]


# --- examples ---------------------------------------------------------------------------------


def test_under_every_threshold_no_split() -> None:
    assert split([topic(100, 15000), topic(200, 14999)]).boundaries == ()


def test_three_heavy_topics_make_three_children() -> None:
    # Target 24000 msg/s (30000 x 0.8): no two 20000 topics fit together.
    result = split([topic(100, 20000), topic(200, 20000), topic(300, 20000)])
    assert result.boundaries == (151, 251)  # Pulsar's midpoint rule
    assert [c.msg_rate for c in result.children] == [20000, 20000, 20000]


def test_children_are_flow_equal_not_full_full_tiny() -> None:
    # 10 topics of 5000: 50000 needs 3 children under 24000; greedy packing would give
    # 20000/20000/10000, the min-max split 20000/15000/15000 or better: heaviest 20000 at most
    # and no child under 10000.
    topics = [topic(100 * (i + 1), 5000) for i in range(10)]
    result = split(topics)
    rates = [c.msg_rate for c in result.children]
    assert len(rates) == 3 and max(rates) == 20000 and min(rates) >= 15000


def test_topic_count_is_a_target_too() -> None:
    topics = [topic(1000 + 7 * i) for i in range(1001)]  # over 1000 topics, no traffic
    counts = [c.topics for c in split(topics).children]
    assert sorted(counts) == [500, 501]  # 2 children under 800, heaviest as light as possible


def test_throughput_target() -> None:
    topics = [topic(100 * (i + 1), 0, 30 * MIB) for i in range(5)]  # 150 MiB/s > 100
    result = split(topics)
    # Target 80 MiB/s: at most 2 topics (60 MiB/s) per child, so 3 children.
    assert sorted(c.topics for c in result.children) == [1, 2, 2]
    assert max(c.throughput_bytes for c in result.children) <= 80 * MIB


def test_sessions_count_unless_disabled() -> None:
    topics = [topic(100, sessions=600), topic(200, sessions=600)]
    assert len(split(topics).children) == 2  # 1200 sessions > 1000
    assert split(topics, max_sessions=0).boundaries == ()  # <= 0 disables sessions


def test_outstanding_topic_gets_a_child_of_its_own() -> None:
    result = split([topic(100, 1000), topic(200, 50000), topic(300, 1000)])
    assert [c.msg_rate for c in result.children] == [1000, 50000, 1000]


def test_outstanding_topic_and_balanced_rest() -> None:
    topics = [topic(100, 50000)] + [topic(1000 + i, 4000) for i in range(10)]
    rates = [c.msg_rate for c in split(topics).children]
    assert rates[0] == 50000
    assert len(rates) == 3 and rates[1:] == [20000, 20000]


def test_topics_on_the_same_position_are_never_separated() -> None:
    topics = [topic(100, 20000), topic(100, 20000), topic(900, 1000)]
    result = split(topics)
    assert result.boundaries == (501,)
    assert [c.topics for c in result.children] == [2, 1]


def test_one_position_no_split() -> None:
    assert split([topic(100, 50000), topic(100, 50000)]).boundaries == ()


def test_boundary_may_equal_the_next_hash() -> None:
    result = split([topic(10, 20000), topic(11, 20000)])
    assert result.boundaries == (11,)  # 10 + 0 + 1: [.., 11) holds 10, [11, ..) holds 11
    assert [c.topics for c in result.children] == [1, 1]


def test_boundary_kept_below_the_closed_upper_end() -> None:
    # The midpoint rule gives 0xfffffffd + 1 + 1 = 0xffffffff, the bundle's upper bound.
    result = split([topic(FULL_UPPER - 2, 20000), topic(FULL_UPPER, 20000)])
    assert result.boundaries == (FULL_UPPER - 1,)
    assert [c.topics for c in result.children] == [1, 1]


def test_topics_at_the_last_two_positions_are_inseparable() -> None:
    pair = [topic(FULL_UPPER - 1, 20000), topic(FULL_UPPER, 20000)]
    assert split(pair).boundaries == ()
    result = split([topic(0x10, 20000), *pair])
    assert result.boundaries == (0x10 + (FULL_UPPER - 1 - 0x10) // 2 + 1,)
    assert [c.topics for c in result.children] == [1, 2]


def test_max_children_caps_and_balances() -> None:
    topics = [topic(100 * (i + 1), 20000) for i in range(4)]
    assert len(split(topics).children) == 4
    assert [c.msg_rate for c in split(topics, max_children=2).children] == [40000, 40000]
    assert [c.msg_rate for c in split(topics, max_children=3).children] in (
        [40000, 20000, 20000],
        [20000, 40000, 20000],
        [20000, 20000, 40000],
    )
    assert split(topics, max_children=1).boundaries == ()
    assert len(split(topics, max_children=10).children) == 4  # a cap, not a goal


def test_force_splits_a_light_bundle_in_two() -> None:
    topics = [topic(100, 10), topic(200, 10), topic(300, 10), topic(400, 10)]
    assert split(topics).boundaries == ()
    assert [c.topics for c in split(topics, force=True).children] == [2, 2]


def test_fill_factor_sets_the_target() -> None:
    topics = [topic(100 * (i + 1), 10000) for i in range(4)]  # 40000
    assert len(split(topics, fill_factor=0.8).children) == 2  # 24000: 2 + 2
    assert len(split(topics, fill_factor=0.5).children) == 4  # 15000: one topic each
    assert len(split(topics, fill_factor=0.3).children) == 4  # 9000: every topic outstanding
    assert len(split(topics, fill_factor=0.6).children) == 4  # 18000: no two topics fit


@pytest.mark.parametrize(
    "bad",
    [
        TopicLoad("a", 1, msg_rate_in=-1.0),
        TopicLoad("a", 1, msg_throughput_out=float("nan")),
        TopicLoad("a", 1, msg_rate_out=float("inf")),
        TopicLoad("a", 1, consumer_count=-1),
    ],
    ids=["negative-rate", "nan", "inf", "negative-count"],
)
def test_bad_loads_are_a_clear_error(bad: TopicLoad) -> None:
    with pytest.raises(SplitError, match=r"negative|non-finite"):
        balanced_flow_divide(FULL, [bad, topic(5, 50000)])


def test_pure_function_equals_compute_split() -> None:
    topics = [topic(100 * (i + 1), 9000) for i in range(7)]
    assert balanced_flow_divide(FULL, topics) == split(topics).boundaries


def test_hundred_thousand_topics_split_by_the_topic_limit() -> None:
    # How fast is bench.split_time's figure (docs/benchmarks-splits.md), not a timed assert:
    # this one failed twice under load on a 2-core machine while passing alone.
    rng = random.Random(7)
    topics = [
        TopicLoad(
            "x",
            rng.randrange(2**32),
            msg_rate_in=rng.expovariate(1 / 5),
            msg_throughput_in=rng.expovariate(1 / 5000),
        )
        for _ in range(100_000)
    ]
    result = split(topics)
    assert len(result.children) == 125  # 100,000 topics / 800 per child
    assert max(c.topics for c in result.children) <= 800


# --- properties against a brute-force reference ------------------------------------------------

OPTIONS = SplitOptions(max_msg_rate=100, max_bandwidth_mbytes=1, max_topics=5, max_sessions=10)
TARGETS = (100 * 0.8, 1 * MIB * 0.8, 5 * 0.8, 10 * 0.8)
BUNDLES = st.sampled_from(
    [
        FULL,
        BundleRange(0x40000000, 0x80000000),
        BundleRange(0xC0000000, FULL_UPPER),
        BundleRange(1000, 1032),
    ]
)


def weight(members: Sequence[TopicLoad]) -> float:
    """A group's largest share of the targets, computed independently of the implementation."""
    sums = (
        sum(t.msg_rate for t in members),
        sum(t.throughput_bytes for t in members),
        len(members),
        sum(t.sessions for t in members),
    )
    return max(s / target for s, target in zip(sums, TARGETS, strict=True))


def units_of(bundle: BundleRange, topics: Sequence[TopicLoad]) -> list[list[TopicLoad]]:
    """Topics grouped by position; 0xfffffffe and 0xffffffff of the last bundle together."""
    by_position: dict[int, list[TopicLoad]] = {}
    for t in sorted(topics, key=lambda t: t.position):
        key = t.position
        if bundle.is_last and key == FULL_UPPER and FULL_UPPER - 1 in by_position:
            key = FULL_UPPER - 1
        by_position.setdefault(key, []).append(t)
    return [by_position[p] for p in sorted(by_position)]


def partitions(n: int) -> list[list[tuple[int, int]]]:
    """Every split of range(n) into contiguous groups, as (start, end) pairs."""
    out = []
    for cuts in itertools.product((False, True), repeat=max(n - 1, 0)):
        starts = [0] + [i + 1 for i, cut in enumerate(cuts) if cut]
        out.append(list(zip(starts, [*starts[1:], n], strict=True)))
    return out


def reference(units: list[list[TopicLoad]], max_children: int | None) -> tuple[int, float]:
    """(fewest allowed children, least heaviest child at the count used) by brute force."""
    allowed = []
    for p in partitions(len(units)):
        members = [[t for u in units[a:b] for t in u] for a, b in p]
        ok = all(
            weight(m) <= 1 + TOLERANCE or b - a == 1 for m, (a, b) in zip(members, p, strict=True)
        )
        allowed.append((len(p), ok, max(weight(m) for m in members)))
    fewest = min(k for k, ok, _ in allowed if ok)
    if max_children is not None and max_children < fewest:
        return fewest, min(w for k, _, w in allowed if k <= max_children)
    return fewest, min(w for k, ok, w in allowed if ok and k == fewest)


@st.composite
def loaded_bundles(draw: st.DrawFn) -> tuple[BundleRange, list[TopicLoad]]:
    bundle = draw(BUNDLES)
    edges = [bundle.lower, bundle.lower + 1, bundle.upper - 2, bundle.upper - 1, bundle.upper]
    position = st.sampled_from(edges) | st.integers(bundle.lower, bundle.upper)
    rows = draw(
        st.lists(
            st.tuples(position, st.integers(0, 120), st.integers(0, MIB), st.integers(0, 6)),
            min_size=0,
            max_size=9,
        )
    )
    return bundle, [
        TopicLoad(f"t{i}", p, msg_rate_in=float(r), msg_throughput_in=float(b), producer_count=s)
        for i, (p, r, b, s) in enumerate(rows)
    ]


@settings(max_examples=300, deadline=None)
@given(data=loaded_bundles(), max_children=st.none() | st.integers(1, 6), force=st.booleans())
def test_against_brute_force(
    data: tuple[BundleRange, list[TopicLoad]], max_children: int | None, force: bool
) -> None:
    bundle, topics = data
    options = SplitOptions(
        max_msg_rate=100,
        max_bandwidth_mbytes=1,
        max_topics=5,
        max_sessions=10,
        max_children=max_children,
        force=force,
    )
    result = compute_split(BALANCED, bundle, topics, options)
    inside = [t for t in topics if bundle.contains(t.position)]
    units = units_of(bundle, inside)
    children = [c.bundle for c in result.children]

    # Cover, boundaries strictly inside, each topic in exactly one child.
    assert all(bundle.strictly_inside(b) for b in result.boundaries)
    assert list(result.boundaries) == sorted(set(result.boundaries))
    assert children[0].lower == bundle.lower and children[-1].upper == bundle.upper
    assert all(a.upper == b.lower for a, b in itertools.pairwise(children))
    members = [[t for t in inside if c.contains(t.position)] for c in children]
    assert sum(len(m) for m in members) == len(inside)
    assert [len(m) for m in members] == [c.topics for c in result.children]
    assert len(children) <= max(len(units), 1) and len(children) <= max(len(inside), 1)

    over = (
        len(inside) > 5
        or sum(t.sessions for t in inside) > 10
        or sum(t.msg_rate for t in inside) > 100
        or sum(t.throughput_bytes for t in inside) > MIB
    )
    if len(units) < 2 or (not over and not force) or (max_children or 99) < 2:
        assert result.boundaries == ()
        return
    fewest, lightest = reference(units, max_children)
    expected = max(fewest, 2) if force else fewest
    if max_children is not None:
        expected = min(expected, max_children)
    assert len(children) == expected
    if force and fewest < 2:
        return  # forced past the target: only the count is specified
    heaviest = max(weight(m) for m in members)
    if max_children is None or max_children >= fewest:
        # Every child under target, except a single unit that is over on its own.
        for m in members:
            assert (
                weight(m) <= 1 + TOLERANCE
                or len({t.position for t in m}) == 1
                or ({t.position for t in m} == {FULL_UPPER - 1, FULL_UPPER})
            )
        if all(weight(u) <= 1 for u in units):
            assert heaviest <= lightest * (1 + 1e-6) + TOLERANCE
    else:
        assert heaviest <= lightest * (1 + 1e-6) + TOLERANCE
