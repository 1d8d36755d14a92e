"""Pulsar's policies replayed on a small overloaded cluster: each makes the unloads and
splits its Java rule says, on its own layout."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.limits import BundleLimits
from balancer.core.replay.layout import ReplayLayout
from balancer.core.replay.policy import Policy
from balancer.core.replay.pulsar_policies import PulsarPolicy, pulsar_policies
from balancer.core.replay.result import (
    POLICY_PULSAR_THRESHOLD,
    POLICY_PULSAR_TRANSFER,
    POLICY_PULSAR_UNIFORM,
    ActionKind,
)
from balancer.core.replay.window import ReplayWindow
from balancer.core.split import SplitAlgorithm, compute_split
from tests.core.replay.fixtures import CLUSTER, recorded, topic, window_of

HOT = NamespaceBundles.initial("t/a", 20)  # all on b1
WARM = NamespaceBundles.initial("t/b", 4)  # all on b2; b3 owns nothing
MB = 1_000_000.0


def _cluster() -> tuple[ReplayLayout, ReplayWindow]:
    owners = {b.key("t/a"): "b1:8080" for b in HOT.bundles}
    owners |= {b.key("t/b"): "b2:8080" for b in WARM.bundles}
    topics = [topic(f"t/a/hot-{i}", msg_in=100.0, bytes_in=0.5 * MB) for i in range(200)]
    topics += [topic(f"t/b/warm-{i}", msg_in=100.0, bytes_in=0.5 * MB) for i in range(60)]
    ctx, window = recorded(owners, [HOT, WARM], topics, brokers=["b3:8080"])
    return ReplayLayout.from_contexts([ctx]), window_of(ctx, window)


def _policy(name: str) -> PulsarPolicy:
    return next(p for p in pulsar_policies() if p.name == name)


def _later(window: ReplayWindow, minutes: int) -> ReplayWindow:
    return replace(window, window_end_ms=window.window_end_ms + minutes * 60_000)


def test_the_pulsar_policies_are_policies() -> None:
    policies: list[Policy] = list(pulsar_policies())
    assert [p.name for p in policies] == [
        POLICY_PULSAR_THRESHOLD,
        POLICY_PULSAR_UNIFORM,
        POLICY_PULSAR_TRANSFER,
    ]
    assert all(p.description for p in policies)


def test_threshold_sheds_b1s_largest_bundles_down_to_avg_plus_5_percent_onto_the_idle_broker() -> (
    None
):
    layout, window = _cluster()
    views = layout.broker_loads(window)
    usage = {b: v.load_ratio for (_, b), v in views.items()}
    avg = sum(usage.values()) / len(usage)
    b1 = views[(CLUSTER, "b1:8080")]
    # ThresholdShedder: offload (usage - avg - 0.10 + 0.05) of the broker's throughput, the
    # largest bundles first, at least one.
    to_offload = b1.throughput_bytes * (usage["b1:8080"] - avg - 0.10 + 0.05)
    by_size = sorted(
        (b for b in layout.bundle_loads(window) if b.namespace == "t/a"),
        key=lambda b: -b.throughput_bytes,
    )
    expected, marked = [], 0.0
    for b in by_size:
        if marked >= to_offload:
            break
        expected.append(b.bundle.key("t/a"))
        marked += b.throughput_bytes
    actions = _policy(POLICY_PULSAR_THRESHOLD).step(window, layout)
    assert [a.subject for a in actions] == expected
    # Every bundle of a cycle is placed on the same loads: all to the idle broker.
    assert {(a.kind, a.source_broker, a.destination_broker) for a in actions} == {
        (ActionKind.MOVE, "b1:8080", "b3:8080")
    }
    assert all(layout.owner(CLUSTER, a.subject) == "b3:8080" for a in actions)
    assert all(a.sessions_moved > 0 and "ThresholdShedder" in a.reason for a in actions)
    after = layout.broker_loads(window)
    assert after[(CLUSTER, "b1:8080")].load_ratio < b1.load_ratio
    # A bundle just unloaded is not unloaded again within the grace period (30 min).
    assert not {a.subject for a in _policy_again(layout, window)} & set(expected)


def _policy_again(layout: ReplayLayout, window: ReplayWindow) -> list:
    policy = _policy(POLICY_PULSAR_THRESHOLD)
    first = policy.step(window, layout)
    return first + policy.step(_later(window, 1), layout)


def test_uniform_sheds_20_percent_of_the_msg_rate_gap_from_the_busiest_broker() -> None:
    layout, window = _cluster()
    views = layout.broker_loads(window)
    rates = {b: v.msg_rate for (_, b), v in views.items()}
    top = max(rates, key=lambda b: rates[b])
    low = min(rates.values()) or 1.0  # UniformLoadShedder: a min of 0 counts as 1
    required = int((rates[top] - low) * 0.2)
    actions = _policy(POLICY_PULSAR_UNIFORM).step(window, layout)
    assert top == "b1:8080" and actions
    moved = [
        b
        for b in layout.bundle_loads(window)
        if b.bundle.key("t/a") in {a.subject for a in actions}
    ]
    # Largest first, each at most the remainder + 1000 msg/s.
    assert sum(b.msg_rate for b in moved) <= required + 1000 * len(moved)
    assert {a.source_broker for a in actions} == {"b1:8080"}
    assert {a.destination_broker for a in actions} == {"b3:8080"}


def test_transfer_waits_for_4_checks_then_halves_the_gap_and_cools_down() -> None:
    layout, window = _cluster()
    policy = _policy(POLICY_PULSAR_TRANSFER)
    assert [policy.step(_later(window, m), layout) for m in range(3)] == [[], [], []]
    actions = policy.step(_later(window, 3), layout)
    assert actions and all(a.kind is ActionKind.MOVE for a in actions)
    # The most loaded broker to the least loaded one (at most 3 pairs a cycle).
    assert ("b1:8080", "b3:8080") in {(a.source_broker, a.destination_broker) for a in actions}
    # 180 s cooldown of the brokers just transferred: the next cycles do nothing.
    assert policy.step(_later(window, 4), layout) == []
    assert policy.step(_later(window, 5), layout) == []


def test_modular_splits_at_once_and_unloads_the_children_for_placement() -> None:
    layout, window = _cluster()
    policy = replace(_policy(POLICY_PULSAR_THRESHOLD), limits=BundleLimits(max_topics=15))
    over = {b.bundle.key(b.namespace): b for b in layout.bundle_loads(window) if b.topic_count > 15}
    assert over, "the fixture needs a bundle over 15 topics"
    actions = policy.step(window, layout)
    splits = [a for a in actions if a.kind is ActionKind.SPLIT]
    assert {a.subject for a in splits} == set(over)
    for a in splits:
        assert len(a.children) == 2  # range_equally_divide: one boundary, in the middle
        assert a.sessions_moved == over[a.subject].session_count  # children unloaded
    child_moves = [a for a in actions if a.reason.startswith("split child")]
    assert all(a.sessions_moved == 0 for a in child_moves)  # counted with the split


def test_extensible_splits_on_the_4th_check_and_keeps_the_children_on_the_owner() -> None:
    layout, window = _cluster()
    policy = replace(_policy(POLICY_PULSAR_TRANSFER), limits=BundleLimits(max_topics=15))
    steps = [policy.step(_later(window, m), layout) for m in range(4)]
    assert not any(a.kind is ActionKind.SPLIT for step in steps[:3] for a in step)
    splits = [a for a in steps[3] if a.kind is ActionKind.SPLIT]
    assert splits and all(a.sessions_moved == 0 for a in splits)
    shed = {a.subject for a in steps[3] if a.kind is ActionKind.MOVE}
    for a in splits:
        namespace = a.subject.rsplit("/", 1)[0]
        for child in a.children:
            key = f"{namespace}/{child}"
            if key not in shed:  # else the same cycle's TransferShedder moved it after
                assert layout.owner(CLUSTER, key) == a.source_broker


def test_a_longer_window_runs_one_cycle_a_minute() -> None:
    layout, window = _cluster()
    policy = replace(_policy(POLICY_PULSAR_TRANSFER), window_s=300)
    assert policy.cycles_per_window == 5
    # Five checks in one window: the 4th already decides.
    assert policy.step(window, layout)


@pytest.mark.parametrize("name", [POLICY_PULSAR_THRESHOLD, POLICY_PULSAR_UNIFORM])
def test_a_balanced_cluster_is_left_alone(name: str) -> None:
    ns = NamespaceBundles.initial("t/a", 3)
    owners = {b.key("t/a"): f"b{i + 1}:8080" for i, b in enumerate(ns.bundles)}
    topics = [topic(f"t/a/even-{i}", msg_in=10.0, bytes_in=1000.0) for i in range(30)]
    ctx, w = recorded(owners, [ns], topics)
    layout = ReplayLayout.from_contexts([ctx])
    assert _policy(name).step(window_of(ctx, w), layout) == []


def test_a_broker_the_layout_has_not_followed_yet_is_no_destination() -> None:
    followed, window = _cluster()
    ctx = window.contexts[CLUSTER]
    without_b3 = replace(ctx, reports=tuple(r for r in ctx.reports if r.broker != "b3:8080"))
    layout = ReplayLayout.from_contexts([without_b3])
    actions = _policy(POLICY_PULSAR_THRESHOLD).step(window, layout)
    assert actions and "b3:8080" not in {a.destination_broker for a in actions}
    layout.follow(ctx)
    assert layout.brokers(CLUSTER) == followed.brokers(CLUSTER)


def test_a_split_by_topic_count_divides_the_windows_topics_of_the_bundle() -> None:
    """The window's roll-ups carry no topic objects; a split algorithm that needs the
    bundle's topics (TopicCountEquallyDivideBundleSplitAlgorithm) is given them."""
    layout, window = _cluster()
    policy = replace(
        _policy(POLICY_PULSAR_THRESHOLD),
        limits=BundleLimits(max_topics=15),
        algorithm=SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE,
    )
    over = [b for b in layout.bundle_loads(window) if b.topic_count > 15]
    assert over, "the fixture needs a bundle over 15 topics"
    topics = {
        b.bundle.key(b.namespace): [
            t.load
            for t in window.topics()
            if t.load.topic.startswith(f"persistent://{b.namespace}/")
        ]
        for b in over
    }
    expected = {
        key: (
            b.bundle.lower,
            *compute_split(
                SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, b.bundle, topics[key]
            ).boundaries,
            b.bundle.upper,
        )
        for b in over
        for key in [b.bundle.key(b.namespace)]
    }
    splits = [a for a in policy.step(window, layout) if a.kind is ActionKind.SPLIT]
    assert {a.subject for a in splits} == set(expected)
    for a in splits:
        points = [int(c.split("_")[0], 16) for c in a.children] + [expected[a.subject][-1]]
        assert tuple(points) == expected[a.subject]
        b = BundleRange(expected[a.subject][0], expected[a.subject][-1])
        assert points[1] != b.lower + b.width // 2  # by the topics, not the range's middle
