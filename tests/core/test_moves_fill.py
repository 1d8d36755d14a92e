"""Filling an idle broker with the fewest moves (balancer.core.moves.fill), and the decision
that uses it."""

from __future__ import annotations

from dataclasses import replace

from balancer.core.moves.fill import (
    MAX_WAIT_S,
    SLACK,
    FillItem,
    FillLimits,
    fewest_fill,
    largest_fill,
)
from balancer.core.moves.model import MoveReason, MoveSettings
from tests.core.moves_fixtures import cluster, decide

NOW_MS = 10**9  # decide()'s time


def limits(need: float, room: float, **rooms: float) -> FillLimits:
    return FillLimits(
        need=need,
        room=room,
        max_moves=10,
        source_room=rooms,
        source_moves=dict.fromkeys(rooms, 10),
    )


def items(source: str, *gains: float) -> list[FillItem]:
    return [FillItem(f"{source}/{i}", source, g, g) for i, g in enumerate(gains)]


def test_the_search_takes_fewer_moves_than_largest_first() -> None:
    # Need 0.7 with room 0.75: largest first takes 0.5, cannot fit a 0.35, then needs both
    # 0.1s (3 moves); the two 0.35s reach it in 2.
    pool = items("a", 0.5, 0.35, 0.35, 0.1, 0.1)
    assert len(largest_fill(pool, limits(0.7, 0.75, a=1.0))) == 3
    found = fewest_fill(pool, limits(0.7, 0.75, a=1.0))
    assert found is not None
    assert sorted(i.gain for i in found.items) == [0.35, 0.35]
    assert found.moves == 2


def test_the_search_keeps_each_source_within_its_room_and_the_need_within_reach() -> None:
    pool = items("a", 0.4, 0.4) + items("b", 0.3, 0.3)
    # a may shed 0.4 only: one of its bundles and both of b's (3), not two of a's (2).
    found = fewest_fill(pool, limits(0.8, 2.0, a=0.4, b=1.0))
    assert found is not None and found.moves == 3
    assert sorted(i.source for i in found.items) == ["a", "b", "b"]
    # Out of reach: no set.
    assert fewest_fill(pool, limits(1.5, 2.0, a=0.4, b=1.0)) is None


def test_the_search_prefers_the_least_load_among_the_fewest_moves() -> None:
    pool = items("a", 0.5, 0.3, 0.25)
    found = fewest_fill(pool, limits(0.5, 1.0, a=1.0))
    assert found is not None and [i.gain for i in found.items] == [0.5]
    found = fewest_fill(pool, limits(0.52, 1.0, a=1.0))
    assert found is not None and sorted(i.gain for i in found.items) == [0.25, 0.3]


def test_among_as_few_moves_the_search_passes_the_need_by_a_slack_first() -> None:
    # Need 0.5: 0.3 + 0.2 reach it exactly, 0.3 + 0.25 pass it by 0.05 (>= SLACK): the
    # next window re-measures, and a set that only just reaches the need then falls short.
    pool = items("a", 0.3, 0.25, 0.2)
    found = fewest_fill(pool, limits(0.5, 1.0, a=1.0))
    assert found is not None and sorted(i.gain for i in found.items) == [0.25, 0.3]
    assert found.load - 0.5 >= SLACK


def test_the_search_counts_what_a_source_over_target_must_shed_anyway() -> None:
    # b is 0.1 over its target: a fill with one of b's bundles saves the move b needs.
    pool = items("a", 0.2, 0.1) + items("b", 0.1, 0.1)
    over = replace(limits(0.3, 1.0, a=1.0, b=1.0), source_min={"b": 0.1})
    found = fewest_fill(pool, over)
    assert found is not None and found.moves == 2
    assert sorted(i.source for i in found.items) == ["a", "b"]


def test_one_bundle_per_range_among_the_moves_of_this_cycle() -> None:
    pool = [
        FillItem("x/r1", "a", 0.3, 0.3, range_key="r1"),
        FillItem("y/r1", "a", 0.3, 0.3, range_key="r1"),
        FillItem("x/r2", "a", 0.2, 0.2, range_key="r2"),
        FillItem("x/r3", "a", 0.2, 0.2, range_key="r3"),
    ]
    found = fewest_fill(pool, limits(0.6, 1.0, a=1.0))
    assert found is not None
    assert len(found.items) == 3  # not both of r1
    assert len({i.range_key for i in found.items}) == 3


def test_an_idle_broker_is_filled_in_the_fewest_moves() -> None:
    # mean 0.476, low 0.376, target 0.576: e (0.30) is idle and needs 0.076. The greedy
    # fill took a's 0.052 first (a is first among equals by name: it covers a's excess
    # over the mean), then b's 0.08 (2 moves); b's 0.08 alone lifts e (1 move).
    brokers, bundles = cluster(
        {
            "a:1": [0.052] * 10,
            "b:1": [0.08, 0.44],
            "c:1": [0.26, 0.26],
            "d:1": [0.26, 0.26],
            "e:1": [0.30],
        }
    )
    p = decide(brokers, bundles)
    assert p.balanced_after
    assert [(m.source, m.destination, m.reason) for m in p.moves] == [
        ("b:1", "e:1", MoveReason.IDLE_BROKER)
    ]
    assert round(p.moves[0].bundle_load_ratio, 3) == 0.08


def test_a_fill_waits_for_a_larger_bundle_whose_grace_ends_soon() -> None:
    # mean 0.3, low 0.2, target 0.4: c (0.1) is idle and needs 0.1; a and b are within
    # their target. b's 0.1s end their grace period in 2 minutes, a's bundles are 0.05s:
    # filling from a now takes 2 moves, b's 0.1 once its grace ends 1: nothing now.
    brokers, bundles = cluster({"a:1": [0.05] * 8, "b:1": [0.1] * 4, "c:1": [0.1]})
    grace_ms = int(MoveSettings().grace_period_s * 1000)
    soon = NOW_MS - grace_ms + 120_000
    bundles = [replace(x, last_moved_ms=soon) if x.owner == "b:1" else x for x in bundles]
    p = decide(brokers, bundles)
    assert p.moves == () and not p.balanced_after
    # Once the grace period is over: one of b's, 1 move.
    later = [replace(x, last_moved_ms=NOW_MS - 10**8) for x in bundles]
    p = decide(brokers, later)
    assert p.balanced_after
    assert [(m.source, round(m.bundle_load_ratio, 3)) for m in p.moves] == [("b:1", 0.1)]


def test_a_fill_does_not_wait_for_a_grace_period_that_ends_later_than_max_wait() -> None:
    brokers, bundles = cluster({"a:1": [0.05] * 8, "b:1": [0.1] * 4, "c:1": [0.1]})
    grace_ms = int(MoveSettings().grace_period_s * 1000)
    late = NOW_MS - grace_ms + int(MAX_WAIT_S * 1000) + 60_000
    bundles = [replace(x, last_moved_ms=late) if x.owner == "b:1" else x for x in bundles]
    p = decide(brokers, bundles)
    assert p.balanced_after
    assert [(m.source, round(m.bundle_load_ratio, 3)) for m in p.moves] == [
        ("a:1", 0.05),
        ("a:1", 0.05),
    ]
