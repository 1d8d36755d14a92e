"""The detector: reasons and their order, hysteresis, gates, budgets, overrides, offloads."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.bundles import BundleRange
from balancer.core.decisions import SkipReason, SplitReason, split_decision_id
from balancer.core.detect import (
    DetectionSettings,
    DetectorState,
    detect,
    detect_offloads,
    over_threshold,
)
from balancer.core.limits import BundleLimits
from balancer.core.load import BundleLoad, TopicLoad, roll_up
from balancer.core.split import SplitAlgorithm
from balancer.core.thresholds import NamespacePolicy, PolicyOverride, Thresholds

NS = "acme/orders"
FULL = BundleRange(0x00000000, 0x40000000)
MIB = 1_048_576
W = 60_000  # one window step in ms


def topics(
    n: int,
    *,
    rate: float = 0.0,
    bandwidth: float = 0.0,
    sessions: int = 0,
    bundle: BundleRange = FULL,
) -> tuple[TopicLoad, ...]:
    step = bundle.width // (n + 1)
    return tuple(
        TopicLoad(
            topic=f"persistent://{NS}/t{i}",
            position=bundle.lower + step * (i + 1),
            msg_rate_in=rate,
            msg_throughput_in=bandwidth,
            producer_count=sessions,
        )
        for i in range(n)
    )


def bundle_load(
    ts: tuple[TopicLoad, ...],
    *,
    window_end_ms: int = W,
    bundle: BundleRange = FULL,
    namespace: str = NS,
    cluster: str = "c1",
    known: int | None = None,
) -> BundleLoad:
    return roll_up(
        cluster=cluster,
        namespace=namespace,
        bundle=bundle,
        window_end_ms=window_end_ms,
        topics=ts,
        known_topics=known,
    )


HOT = topics(10, rate=4000.0)  # 40k msg/s > 30k


def run(
    loads: list[BundleLoad],
    *,
    state: DetectorState | None = None,
    now_ms: int = 0,
    thresholds: Thresholds | None = None,
    s: DetectionSettings | None = None,
    counts: dict[tuple[str, str], int] | None = None,
):  # type: ignore[no-untyped-def]
    return detect(
        bundles=loads,
        window_end_ms=loads[0].window_end_ms if loads else W,
        now_ms=now_ms,
        thresholds=thresholds or Thresholds(),
        settings=s or DetectionSettings(hit_count_threshold=1),
        state=state or DetectorState(),
        bundle_counts=counts,
    )


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (topics(1001), (SplitReason.TOPICS,)),
        (topics(10, sessions=101), (SplitReason.SESSIONS,)),
        (topics(10, rate=3001.0), (SplitReason.MSG_RATE,)),
        (topics(10, bandwidth=10.1 * MIB), (SplitReason.BANDWIDTH,)),
        (topics(10, rate=3000.0, bandwidth=10 * MIB, sessions=100), ()),
        (
            topics(1001, rate=31.0, bandwidth=0.2 * MIB, sessions=1),
            (SplitReason.TOPICS, SplitReason.SESSIONS, SplitReason.MSG_RATE, SplitReason.BANDWIDTH),
        ),
        (topics(10, rate=3001.0, sessions=101), (SplitReason.SESSIONS, SplitReason.MSG_RATE)),
    ],
    ids=[
        "topics",
        "sessions",
        "msg-rate",
        "bandwidth",
        "at-limits-not-over",
        "all-four-in-order",
        "sessions-before-msgrate",
    ],
)
def test_reasons_in_pulsar_priority_order(
    ts: tuple[TopicLoad, ...], expected: tuple[SplitReason, ...]
) -> None:
    assert over_threshold(bundle_load(ts), BundleLimits()) == expected


def test_sessions_limit_zero_disables_it() -> None:
    load = bundle_load(topics(10, sessions=10_000))
    assert over_threshold(load, BundleLimits(max_sessions=0)) == ()


def test_reason_spelling_is_pulsars() -> None:
    assert [r.value for r in SplitReason] == [
        "Topics",
        "Sessions",
        "MsgRate",
        "Bandwidth",
        "Admin",
        "Unknown",
    ]


def test_split_decision_carries_everything() -> None:
    result = run([bundle_load(HOT)])
    (d,) = result.splits
    assert d.bundle == FULL and d.namespace == NS and d.cluster == "c1"
    assert d.algorithm is SplitAlgorithm.BALANCED_FLOW_DIVIDE
    assert d.reasons == (SplitReason.MSG_RATE,) and d.reason is SplitReason.MSG_RATE
    assert d.boundaries and all(FULL.strictly_inside(b) for b in d.boundaries)
    assert len(d.children) == len(d.boundaries) + 1
    assert sum(c.msg_rate for c in d.children) == pytest.approx(40_000.0)
    assert all(c.msg_rate <= 30_000 for c in d.children)
    assert d.inputs.msg_rate == pytest.approx(40_000.0) and d.inputs.topic_count == 10
    assert d.decision_id == split_decision_id(
        cluster="c1", namespace=NS, bundle=FULL, window_end_ms=W
    )
    assert d.to_dict()["reasons"] == ["MsgRate"]


def test_decision_id_is_stable_and_distinct() -> None:
    a = split_decision_id(cluster="c1", namespace=NS, bundle=FULL, window_end_ms=W)
    assert a == split_decision_id(cluster="c1", namespace=NS, bundle=FULL, window_end_ms=W)
    others = {
        split_decision_id(cluster="c2", namespace=NS, bundle=FULL, window_end_ms=W),
        split_decision_id(cluster="c1", namespace="acme/x", bundle=FULL, window_end_ms=W),
        split_decision_id(
            cluster="c1", namespace=NS, bundle=BundleRange(0, 0x20000000), window_end_ms=W
        ),
        split_decision_id(cluster="c1", namespace=NS, bundle=FULL, window_end_ms=2 * W),
    }
    assert a not in others and len(others) == 4


def _windows(
    over: list[bool], *, hit_count: int = 3, complete: list[bool] | None = None
) -> list[int]:
    """Feed consecutive windows; return the window indexes that produced a split."""
    state = DetectorState()
    decided: list[int] = []
    s = DetectionSettings(hit_count_threshold=hit_count, cooldown_ms=0)
    for i, hot in enumerate(over):
        ts = HOT if hot else topics(10, rate=10.0)
        known = None if complete is None or complete[i] else 100
        result = run(
            [bundle_load(ts, window_end_ms=(i + 1) * W, known=known)],
            state=state,
            s=s,
            now_ms=(i + 1) * W,
        )
        state = result.state
        if result.splits:
            decided.append(i)
    return decided


@pytest.mark.parametrize(
    ("over", "complete", "expected"),
    [
        ([True, True, True], None, [2]),
        ([True, True], None, []),
        ([True, True, False, True, True, True], None, [5]),
        ([True, True, True, True, True, True], None, [2, 5]),
        ([True, True, True], [True, False, True], []),
        ([True, True, True, True, True], [True, False, True, True, True], [4]),
    ],
    ids=[
        "third-window-acts",
        "two-not-enough",
        "drop-resets",
        "count-restarts-after-split",
        "incomplete-window-no-decision",
        "incomplete-resets-count",
    ],
)
def test_hysteresis(over: list[bool], complete: list[bool] | None, expected: list[int]) -> None:
    assert _windows(over, complete=complete) == expected


def test_same_window_seen_twice_counts_once() -> None:
    s = DetectionSettings(hit_count_threshold=2)
    first = run([bundle_load(HOT, window_end_ms=W)], s=s)
    again = run([bundle_load(HOT, window_end_ms=W)], s=s, state=first.state)
    assert again.splits == ()
    assert again.state.hits == first.state.hits
    older = run([bundle_load(HOT, window_end_ms=W - 1000)], s=s, state=again.state)
    assert older.splits == ()
    nxt = run([bundle_load(HOT, window_end_ms=2 * W)], s=s, state=older.state)
    assert len(nxt.splits) == 1


def test_completeness_gate_reports_skip() -> None:
    result = run([bundle_load(HOT, known=20)])  # 10 of 20 topics reported: 0.5 < 0.9
    assert result.splits == ()
    assert [k.reason for k in result.skipped] == [SkipReason.INCOMPLETE]


def test_missing_bundle_resets_its_count() -> None:
    s = DetectionSettings(hit_count_threshold=2)
    other = bundle_load(
        topics(
            2,
            bundle=BundleRange(0x40000000, 0x80000000),
        ),
        bundle=BundleRange(0x40000000, 0x80000000),
        window_end_ms=2 * W,
    )
    r1 = run([bundle_load(HOT, window_end_ms=W)], s=s)
    r2 = run([other], s=s, state=r1.state)
    r3 = run([bundle_load(HOT, window_end_ms=3 * W)], s=s, state=r2.state)
    assert r3.splits == ()


@pytest.mark.parametrize(
    ("load", "skip"),
    [
        (
            bundle_load((TopicLoad("persistent://acme/orders/solo", 5, msg_rate_in=90_000.0),)),
            SkipReason.TOO_FEW_TOPICS,
        ),
        (
            bundle_load(
                (
                    TopicLoad("persistent://acme/orders/a", 7, msg_rate_in=40_000.0),
                    TopicLoad("persistent://acme/orders/b", 7, msg_rate_in=40_000.0),
                ),
                bundle=BundleRange(7, 8),
            ),
            SkipReason.UNSPLITTABLE,
        ),
    ],
    ids=["one-topic", "width-one-range"],
)
def test_never_splits_what_cannot_be_split(load: BundleLoad, skip: SkipReason) -> None:
    result = run([load])
    assert result.splits == ()
    assert [k.reason for k in result.skipped] == [skip]


@pytest.mark.parametrize(
    ("count", "max_bundles", "expected_children"),
    [(128, 128, None), (127, 128, 2), (126, 128, 3), (4, 128, None)],
    ids=["at-max", "one-left-two-children", "two-left-three-children", "plenty"],
)
def test_max_bundles_counts_children(
    count: int, max_bundles: int, expected_children: int | None
) -> None:
    # 100k msg/s over 20 topics needs 4+ children at 30k (fill 0.8): budget caps it.
    hot = topics(20, rate=5000.0)
    result = run(
        [bundle_load(hot)],
        counts={("c1", NS): count},
        thresholds=Thresholds(NamespacePolicy(max_bundles=max_bundles)),
    )
    if count >= max_bundles:
        assert result.splits == ()
        assert [k.reason for k in result.skipped] == [SkipReason.MAX_BUNDLES]
    elif expected_children is not None:
        (d,) = result.splits
        assert len(d.children) <= expected_children
    else:
        (d,) = result.splits
        assert len(d.children) >= 4


def test_cycle_cap_keeps_the_most_overloaded() -> None:
    ranges = [BundleRange(i * 0x10000000, (i + 1) * 0x10000000) for i in range(4)]
    loads = [
        bundle_load(topics(10, rate=3100.0 + 100 * i, bundle=r), bundle=r)
        for i, r in enumerate(ranges)
    ]
    s = DetectionSettings(hit_count_threshold=1, max_splits_per_cycle=2)
    result = run(loads, s=s)
    assert [d.bundle for d in result.splits] == [ranges[3], ranges[2]]
    assert sorted((k.bundle, k.reason) for k in result.skipped) == [
        (ranges[0], SkipReason.CYCLE_CAP),
        (ranges[1], SkipReason.CYCLE_CAP),
    ]
    # The deferred bundles are still ready next window.
    nxt = run(
        [replace(ld, window_end_ms=2 * W) for ld in loads[:2]],
        s=s,
        state=result.state,
        now_ms=10**9,
    )
    assert len(nxt.splits) == 2


def test_cooldown_per_namespace() -> None:
    s = DetectionSettings(hit_count_threshold=1, cooldown_ms=5 * W)
    other = BundleRange(0x40000000, 0x80000000)
    first = run([bundle_load(HOT)], s=s, now_ms=W)
    assert len(first.splits) == 1
    same_ns = bundle_load(topics(10, rate=4000.0, bundle=other), bundle=other, window_end_ms=2 * W)
    blocked = run([same_ns], s=s, state=first.state, now_ms=2 * W)
    assert blocked.splits == () and blocked.skipped[0].reason is SkipReason.COOLDOWN
    other_ns = replace(same_ns, namespace="acme/other", window_end_ms=3 * W)
    assert len(run([other_ns], s=s, state=blocked.state, now_ms=3 * W).splits) == 1
    later = replace(same_ns, window_end_ms=7 * W)
    assert len(run([later], s=s, state=blocked.state, now_ms=7 * W).splits) == 1


OVERRIDES = Thresholds(
    NamespacePolicy(),
    (
        PolicyOverride(
            "acme/orders", max_msg_rate=50_000.0, algorithm=SplitAlgorithm.RANGE_EQUALLY_DIVIDE
        ),
        PolicyOverride("acme/*", max_msg_rate=1_000.0, max_bundles=8),
        PolicyOverride("*", max_msg_rate=5.0),
    ),
)


@pytest.mark.parametrize(
    ("namespace", "max_msg_rate", "algorithm", "max_bundles"),
    [
        ("acme/orders", 50_000.0, SplitAlgorithm.RANGE_EQUALLY_DIVIDE, 128),
        ("acme/billing", 1_000.0, SplitAlgorithm.BALANCED_FLOW_DIVIDE, 8),
        ("other/ns", 5.0, SplitAlgorithm.BALANCED_FLOW_DIVIDE, 128),
    ],
    ids=["exact-first-match", "tenant-glob", "catch-all"],
)
def test_overrides_first_match_wins(
    namespace: str, max_msg_rate: float, algorithm: SplitAlgorithm, max_bundles: int
) -> None:
    policy = OVERRIDES.policy_for(namespace)
    assert policy.limits.max_msg_rate == max_msg_rate
    assert policy.limits.max_topics == 1000  # untouched fields keep the defaults
    assert policy.algorithm is algorithm and policy.max_bundles == max_bundles


def test_override_changes_detection_and_algorithm() -> None:
    result = run([bundle_load(HOT)], thresholds=OVERRIDES)  # 40k < 50k for acme/orders
    assert result.splits == ()
    hot = topics(10, rate=6000.0)
    (d,) = run([bundle_load(hot)], thresholds=OVERRIDES).splits
    assert d.algorithm is SplitAlgorithm.RANGE_EQUALLY_DIVIDE
    assert d.boundaries == (FULL.lower + FULL.width // 2,)


def test_split_disabled_by_override() -> None:
    th = Thresholds(overrides=(PolicyOverride(NS, split_enabled=False),))
    result = run([bundle_load(HOT)], thresholds=th)
    assert result.splits == () and result.skipped[0].reason is SkipReason.SPLIT_DISABLED


GIB = 1024**3


@pytest.mark.parametrize(
    ("storage", "offloaded", "threshold", "decided"),
    [
        (11 * GIB, 0, 10 * GIB, True),
        (10 * GIB, 0, 10 * GIB, False),
        (15 * GIB, 6 * GIB, 10 * GIB, False),
        (11 * GIB, 0, None, False),
    ],
    ids=["over", "at-threshold", "offloaded-part-not-counted", "no-threshold"],
)
def test_offload_decisions(
    storage: int, offloaded: int, threshold: int | None, decided: bool
) -> None:
    th = Thresholds(NamespacePolicy(offload_threshold_bytes=threshold))
    topic = TopicLoad(
        "persistent://acme/orders/big-partition-2",
        1,
        storage_size=storage,
        offloaded_storage_size=offloaded,
    )
    out = detect_offloads([("c1", topic)], window_end_ms=W, thresholds=th)
    assert bool(out) == decided
    if decided:
        assert out[0].topic == topic.topic and out[0].namespace == NS
        assert out[0].threshold_bytes == threshold


def test_offload_partitions_each_and_per_namespace_threshold() -> None:
    th = Thresholds(
        NamespacePolicy(offload_threshold_bytes=10 * GIB),
        (PolicyOverride("acme/logs", offload_threshold_bytes=1 * GIB),),
    )
    rows = [
        ("c1", TopicLoad(f"persistent://acme/orders/o-partition-{i}", 1, storage_size=11 * GIB))
        for i in range(3)
    ] + [
        ("c1", TopicLoad("persistent://acme/logs/l", 1, storage_size=2 * GIB)),
        ("c1", TopicLoad("persistent://acme/orders/small", 1, storage_size=2 * GIB)),
        ("c1", TopicLoad("persistent://a/b/c/d", 1, storage_size=99 * GIB)),
    ]
    out = detect_offloads(rows, window_end_ms=W, thresholds=th)
    assert sorted(d.topic for d in out) == [
        "persistent://acme/logs/l",
        *(f"persistent://acme/orders/o-partition-{i}" for i in range(3)),
    ]
    assert len({d.decision_id for d in out}) == 4


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(min_value=0, max_value=20_000), min_size=2, max_size=30),
    sessions=st.lists(st.integers(min_value=0, max_value=200), min_size=2, max_size=30),
    count=st.integers(min_value=1, max_value=130),
)
def test_every_decision_respects_budget_and_bundle(
    rates: list[float], sessions: list[int], count: int
) -> None:
    n = min(len(rates), len(sessions))
    step = FULL.width // (n + 1)
    ts = tuple(
        TopicLoad(
            f"persistent://{NS}/p{i}",
            FULL.lower + step * (i + 1),
            msg_rate_in=rates[i],
            producer_count=sessions[i],
        )
        for i in range(n)
    )
    result = run([bundle_load(ts)], counts={("c1", NS): count})
    for d in result.splits:
        assert d.reasons and list(d.reasons) == sorted(d.reasons, key=list(SplitReason).index)
        assert all(FULL.strictly_inside(b) for b in d.boundaries)
        assert list(d.boundaries) == sorted(set(d.boundaries))
        assert count + len(d.boundaries) <= 128
    if count >= 128:
        assert result.splits == ()


def test_algorithm_error_is_a_skip_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    import balancer.core.detect as detect_module
    from balancer.core.split import SplitError

    def broken(*_: object) -> None:
        raise SplitError("boundaries outside the bundle")

    monkeypatch.setattr(detect_module, "compute_split", broken)
    result = run([bundle_load(HOT)])
    assert result.splits == ()
    assert [k.reason for k in result.skipped] == [SkipReason.ALGORITHM_ERROR]
