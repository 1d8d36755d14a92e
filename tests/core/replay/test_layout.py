"""The replay's simulated layout: built from a recorded round, loads rolled up on it, and the
recorded broker loads corrected for what the policy moved."""

from __future__ import annotations

import pytest

from balancer.core.broker_load import LoadWeights, Resource, load_ratio
from balancer.core.bundles import BundleRange, InvalidBundle, NamespaceBundles
from balancer.core.limits import BundleLimits
from balancer.core.replay.layout import KBIT_PER_BYTE, ReplayLayout
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.window import ReplayWindow
from tests.core.replay.fixtures import CLUSTER, recorded, report, topic, window_of

NS = NamespaceBundles.initial("t/ns", 2)
LOW, HIGH = NS.bundles
LOW_KEY, HIGH_KEY = LOW.key("t/ns"), HIGH.key("t/ns")
OWNERS = {LOW_KEY: "b1:8080", HIGH_KEY: "b2:8080"}


def _topics(n: int = 40) -> list:
    return [topic(f"t/ns/topic-{i}", msg_in=100.0 + i, bytes_in=1e5 * (i + 1)) for i in range(n)]


def _setup() -> tuple[ReplayLayout, ReplayWindow, RoundContext]:
    ctx, window = recorded(OWNERS, [NS], _topics(), brokers=["b3:8080"])
    return ReplayLayout.from_contexts([ctx]), window_of(ctx, window), ctx


def test_the_layout_of_a_round_is_its_reports_bundles_and_owners() -> None:
    layout, _, _ = _setup()
    assert layout.brokers(CLUSTER) == ("b1:8080", "b2:8080", "b3:8080")
    assert layout.clusters[CLUSTER].namespaces["t/ns"] == NS
    assert layout.owner(CLUSTER, LOW_KEY) == "b1:8080"
    assert layout.owner_of(CLUSTER, "t/ns", 0xFFFFFFFF) == "b2:8080"
    assert layout.bundles_of(CLUSTER, "b3:8080") == []


def test_a_layout_equal_to_the_recording_sees_exactly_the_recorded_reports() -> None:
    layout, window, ctx = _setup()
    views = layout.broker_loads(window)
    assert set(views) == {(CLUSTER, r.broker) for r in ctx.reports}
    for r in ctx.reports:
        view = views[(CLUSTER, r.broker)]
        assert view.load_ratio == load_ratio(r.resources, LoadWeights())
        assert view.resources == r.resources
        assert view.msg_rate == r.msg_rate_in + r.msg_rate_out
    sample = layout.sample(window)
    assert sample.broker_load == {
        f"{CLUSTER}/{r.broker}": load_ratio(r.resources, LoadWeights()) for r in ctx.reports
    }


def test_a_move_changes_both_brokers_loads_by_the_bundles() -> None:
    layout, window, ctx = _setup()
    before = layout.broker_loads(window)
    moved = next(b for b in layout.bundle_loads(window) if b.bundle == LOW)
    assert layout.apply_move(CLUSTER, LOW_KEY, "b3:8080") == "b1:8080"
    after = layout.broker_loads(window)
    src, dst = (CLUSTER, "b1:8080"), (CLUSTER, "b3:8080")
    bw = Resource.BANDWIDTH_IN
    assert after[src].resources[bw].usage == pytest.approx(
        before[src].resources[bw].usage - moved.msg_throughput_in * KBIT_PER_BYTE
    )
    assert after[dst].resources[bw].usage == pytest.approx(
        before[dst].resources[bw].usage + moved.msg_throughput_in * KBIT_PER_BYTE
    )
    # cpu follows the msg rate at the source's measured cost: b1 is left with about its base
    # (the fixture's reports are 20 % + 0.01 % per msg/s; the cost also spreads the base).
    assert after[src].msg_rate == pytest.approx(0.0, abs=1e-6)
    assert after[dst].msg_rate == pytest.approx(moved.msg_rate)
    src_cpu = next(r for r in ctx.reports if r.broker == "b1:8080").resources[Resource.CPU]
    assert after[src].resources[Resource.CPU].usage == pytest.approx(0.0, abs=1e-6)
    assert after[dst].resources[Resource.CPU].usage == pytest.approx(
        before[dst].resources[Resource.CPU].usage + src_cpu.usage
    )
    assert after[src].load_ratio < before[src].load_ratio
    assert after[dst].load_ratio > before[dst].load_ratio
    assert after[(CLUSTER, "b2:8080")] == before[(CLUSTER, "b2:8080")]


def test_a_splits_children_own_the_parents_topics_by_position_on_its_owner() -> None:
    layout, window, _ = _setup()
    parent = next(b for b in layout.bundle_loads(window) if b.bundle == LOW)
    middle = LOW.lower + LOW.width // 2
    children = layout.apply_split(CLUSTER, LOW_KEY, [middle])
    assert children == (BundleRange(LOW.lower, middle), BundleRange(middle, LOW.upper))
    assert not layout.has_bundle(CLUSTER, LOW_KEY)
    loads = {b.bundle: b for b in layout.bundle_loads(window)}
    for child in children:
        assert layout.owner(CLUSTER, child.key("t/ns")) == "b1:8080"
        inside = window.topic_loads_in(CLUSTER, "t/ns", child)  # built for the child alone
        assert len(inside) == loads[child].topic_count
        assert all(child.contains(t.position) for t in inside)
    assert loads[children[0]].topic_count + loads[children[1]].topic_count == parent.topic_count
    assert loads[children[0]].msg_rate + loads[children[1]].msg_rate == pytest.approx(
        parent.msg_rate
    )
    # Children on the parent's owner: the brokers' loads are the recorded ones.
    assert layout.broker_loads(window) == ReplayLayout.from_contexts(
        window.contexts.values()
    ).broker_loads(window)


def test_a_split_then_a_move_of_one_child_moves_only_its_topics() -> None:
    layout, window, _ = _setup()
    middle = LOW.lower + LOW.width // 2
    first, _second = layout.apply_split(CLUSTER, LOW_KEY, [middle])
    child = next(b for b in layout.bundle_loads(window) if b.bundle == first)
    before = layout.broker_loads(window)
    layout.apply_move(CLUSTER, first.key("t/ns"), "b2:8080")
    after = layout.broker_loads(window)
    assert after[(CLUSTER, "b2:8080")].msg_rate == pytest.approx(
        before[(CLUSTER, "b2:8080")].msg_rate + child.msg_rate
    )


def test_bad_changes_are_refused() -> None:
    layout, _, _ = _setup()
    with pytest.raises(InvalidBundle):
        layout.apply_move(CLUSTER, "t/ns/0x00000000_0x00000010", "b2:8080")
    with pytest.raises(InvalidBundle):
        layout.apply_move(CLUSTER, LOW_KEY, "nobody:8080")
    with pytest.raises(InvalidBundle):
        layout.apply_split(CLUSTER, LOW_KEY, [HIGH.upper])


def test_the_sample_lists_bundles_over_their_tightest_limit() -> None:
    layout, window, _ = _setup()
    limits = BundleLimits(max_msg_rate=4000.0)
    loads = {b.bundle: b for b in layout.bundle_loads(window)}
    sample = layout.sample(window, limits)
    expected = {
        f"{CLUSTER}/{b.bundle.key('t/ns')}": b.msg_rate / 4000.0
        for b in loads.values()
        if b.msg_rate >= 4000.0
    }
    assert expected and sample.bundles_over == pytest.approx(expected)
    assert sample.bundles == 2 and sample.window_end_ms == window.window_end_ms


def test_overlapping_and_bad_bundle_keys_are_counted_and_the_finer_kept() -> None:
    half = 0x40000000
    reports = (
        report("b1:8080", [LOW_KEY, "t/ns/nonsense"], []),
        report("b2:8080", [f"t/ns/0x00000000_0x{half:08x}", f"t/ns/0x{half:08x}_0x80000000"], []),
    )
    layout = ReplayLayout.from_contexts([RoundContext(CLUSTER, 0, reports)])
    assert layout.invalid_bundles == 1 and layout.conflicting_bundles == 1
    ns = layout.clusters[CLUSTER].namespaces["t/ns"]
    # The finer pair wins; the upper half, owned by nobody, is one unowned bundle.
    assert ns.boundaries == (0, half, 0x80000000, 0xFFFFFFFF)
    assert layout.owner(CLUSTER, HIGH_KEY) is None


def test_follow_rehomes_the_bundles_of_a_broker_that_left() -> None:
    layout, _, _ = _setup()
    layout.apply_move(CLUSTER, HIGH_KEY, "b3:8080")
    gone, _ = recorded(OWNERS, [NS], _topics(), round_ms=120_000)  # b3 is not in it
    assert layout.follow(gone) == 1
    assert layout.brokers(CLUSTER) == ("b1:8080", "b2:8080")
    assert layout.owner(CLUSTER, HIGH_KEY) == "b2:8080"


def test_each_policy_has_its_own_copy() -> None:
    layout, _, _ = _setup()
    other = layout.copy()
    other.apply_move(CLUSTER, LOW_KEY, "b3:8080")
    assert layout.owner(CLUSTER, LOW_KEY) == "b1:8080"


def test_follow_keeps_an_owner_the_round_does_not_contradict() -> None:
    layout, _, _ = _setup()
    # b2's report is missing from this round: nobody claims HIGH, so it stays on b2 (a real
    # departure shows up as another broker owning it in a later round).
    ctx, _ = recorded({LOW_KEY: "b1:8080"}, [NamespaceBundles.initial("t/ns", 2)], [])
    assert layout.follow(ctx) == 0
    assert layout.owner(CLUSTER, HIGH_KEY) == "b2:8080"
    assert layout.brokers(CLUSTER) == ("b1:8080",)


def test_follow_takes_a_namespace_created_during_the_recording() -> None:
    layout, _, _ = _setup()
    new = NamespaceBundles.initial("t/new", 4)
    owners = OWNERS | {b.key("t/new"): "b3:8080" for b in new.bundles}
    ctx, _ = recorded(owners, [NS, new], [], brokers=["b3:8080"])
    layout.follow(ctx)
    assert layout.clusters[CLUSTER].namespaces["t/new"] == new
    assert layout.bundles_of(CLUSTER, "b3:8080") == sorted(b.key("t/new") for b in new.bundles)


def test_a_bundle_spanning_recorded_bundles_moves_each_topic_off_its_recorded_owner() -> None:
    """The policy never split the namespace's one bundle (on b3) while the recording split it
    in two (b1, b2): each topic's load leaves the recorded owner of its half, exactly as
    topic-by-topic moves give it."""
    from balancer.core.replay.correction import LoadDelta, cpu_costs, move_load, newest_reports

    _, window, ctx = _setup()
    whole = NamespaceBundles.initial("t/ns", 1).bundles[0].key("t/ns")
    coarse = RoundContext(CLUSTER, 0, (report("b3:8080", [whole], []),))
    layout = ReplayLayout.from_contexts([coarse])
    layout.follow(ctx)  # the recording's brokers; the namespace stays the policy's own
    assert layout.owner(CLUSTER, whole) == "b3:8080"
    views = layout.broker_loads(window)
    costs = cpu_costs(newest_reports(ctx.reports))
    expected: dict[str, LoadDelta] = {}
    for t in window.topics():
        was = OWNERS[LOW_KEY] if LOW.contains(t.load.position) else OWNERS[HIGH_KEY]
        move_load(expected, t.load, was, "b3:8080", costs)
    for r in ctx.reports:
        view = views[(CLUSTER, r.broker)]
        assert view.msg_rate == max(
            0.0, r.msg_rate_in + r.msg_rate_out + expected[r.broker].msg_rate
        )
        assert view.resources[Resource.CPU].usage == max(
            0.0, r.resources[Resource.CPU].usage + expected[r.broker].cpu_pct
        )
    assert views[(CLUSTER, "b1:8080")].msg_rate == pytest.approx(0.0, abs=1e-6)


def test_a_rounds_recorded_layout_is_built_once_and_policies_changes_never_reach_it() -> None:
    # Every policy follows each round and reads the window's round: one recorded layout per
    # round, shared, so a policy that splits and moves after following must change its own.
    _, window, ctx = _setup()
    shared = ReplayLayout.recorded(ctx)
    assert ReplayLayout.recorded(ctx) is shared
    assert shared == ReplayLayout.from_contexts([ctx])
    policy = ReplayLayout()
    policy.follow(ctx)
    before = ReplayLayout.from_contexts([ctx])
    children = policy.apply_split(CLUSTER, LOW_KEY, [0x40000000])
    policy.apply_move(CLUSTER, children[0].key("t/ns"), "b3:8080")
    policy.apply_move(CLUSTER, HIGH_KEY, "b3:8080")
    assert ReplayLayout.recorded(ctx) == before
    # And the loads read from it: the moves seen against the recorded owners.
    loads = policy.broker_loads(window)
    assert loads[(CLUSTER, "b3:8080")].msg_rate > 0
    # A context equal to an earlier one but not the same object is built anew.
    again = RoundContext(ctx.cluster, ctx.round_ms, ctx.reports)
    assert ReplayLayout.recorded(again) is not shared
    assert ReplayLayout.recorded(again) == shared
