"""The report's figures on hand-made replays whose answers are worked out in the comments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.replay.result import (
    ActionKind,
    PolicyRun,
    ReplayAction,
    ReplayResult,
    WindowSample,
)
from balancer.core.replay.summary import (
    HOUR_MS,
    SUBJECT_BROKER,
    SUBJECT_BUNDLE,
    differing_hours,
    find_overloads,
    reaction,
    summarize,
    summarize_run,
    window_lengths_ms,
)

T0 = 490_000 * HOUR_MS  # an hour's start
MIN = 60_000
BUNDLE = "tenant/ns/0x00000000_0x80000000"


def window(at_ms: int, brokers: dict[str, float], bundles: dict[str, float] | None = None):
    return WindowSample(
        window_end_ms=at_ms, broker_load=brokers, bundles_over=bundles or {}, bundles=4
    )


def move(at_ms: int, subject: str = BUNDLE, source: str = "b1", sessions: int = 0) -> ReplayAction:
    return ReplayAction(
        at_ms=at_ms,
        cluster="c",
        kind=ActionKind.MOVE,
        subject=subject,
        source_broker=source,
        destination_broker="b2",
        sessions_moved=sessions,
    )


def split(at_ms: int, subject: str = BUNDLE, cluster: str = "c") -> ReplayAction:
    return ReplayAction(at_ms=at_ms, cluster=cluster, kind=ActionKind.SPLIT, subject=subject)


def offload(at_ms: int) -> ReplayAction:
    return ReplayAction(
        at_ms=at_ms, cluster="c", kind=ActionKind.OFFLOAD, subject="persistent://tenant/ns/t"
    )


def run(windows, actions=(), policy: str = "ours") -> PolicyRun:
    return PolicyRun(
        policy=policy, description=policy, actions=tuple(actions), windows=tuple(windows)
    )


def result(*runs: PolicyRun, window_s: int = 60) -> ReplayResult:
    ends = [w.window_end_ms for r in runs for w in r.windows]
    return ReplayResult(
        source="test",
        start_ms=min(ends),
        end_ms=max(ends),
        window_s=window_s,
        clusters=("c",),
        topics=1,
        samples=1,
        samples_rejected={},
        samples_late=0,
        runs=runs,
    )


def test_window_lengths_are_the_gaps_between_ends_capped_at_the_window() -> None:
    ends = [T0, T0 + MIN, T0 + 2 * MIN, T0 + 12 * MIN, T0 + 13 * MIN]
    windows = [window(e, {}) for e in ends]
    # The first takes the next gap; a 10 min hole in the recording counts one window (60 s).
    assert window_lengths_ms(windows, 60) == [MIN, MIN, MIN, MIN, MIN]
    # Sliding windows (120 s long, ending every 60 s): each minute is counted once.
    assert window_lengths_ms(windows[:3], 120) == [MIN, MIN, MIN]
    assert window_lengths_ms(windows[:1], 60) == [MIN]
    assert window_lengths_ms([], 60) == []


def test_broker_minutes_count_brokers_at_or_over_85_percent() -> None:
    windows = [
        window(T0, {"c/b1": 0.90, "c/b2": 0.50}),  # 1 broker over
        window(T0 + MIN, {"c/b1": 0.84, "c/b2": 0.95}),  # 1
        window(T0 + 2 * MIN, {"c/b1": 0.85, "c/b2": 1.20}),  # 2 (0.85 is over, as in Pulsar)
        window(T0 + 3 * MIN, {"c/b1": 0.10, "c/b2": 0.10}),  # 0
    ]
    summary = summarize_run(run(windows), window_s=60)
    assert summary.broker_minutes_over == pytest.approx(4.0)
    assert summary.peak_broker_load == pytest.approx(1.20)
    # Windows 30 s apart (sliding): half the minutes.
    half = [window(T0 + i * 30_000, w.broker_load) for i, w in enumerate(windows)]
    assert summarize_run(run(half), window_s=60).broker_minutes_over == pytest.approx(2.0)


def test_bundle_minutes_count_bundles_at_or_over_their_limit() -> None:
    other = "tenant/ns/0x80000000_0xffffffff"
    windows = [
        window(T0, {}, {f"c/{BUNDLE}": 1.5}),
        window(T0 + MIN, {}, {f"c/{BUNDLE}": 1.0, f"c/{other}": 2.0}),
        window(T0 + 2 * MIN, {}, {f"c/{other}": 0.99}),  # under: listed by mistake, not counted
    ]
    assert summarize_run(run(windows), window_s=60).bundle_minutes_over == pytest.approx(3.0)


def test_an_action_two_minutes_into_an_overload_takes_120_s() -> None:
    windows = [
        window(T0, {"c/b1": 0.5}),
        window(T0 + MIN, {"c/b1": 0.9}, {f"c/{BUNDLE}": 1.4}),  # both start here
        window(T0 + 2 * MIN, {"c/b1": 0.9}, {f"c/{BUNDLE}": 1.4}),
        window(T0 + 3 * MIN, {"c/b1": 0.9}, {f"c/{BUNDLE}": 1.4}),
        window(T0 + 4 * MIN, {"c/b1": 0.5}),  # recovered
    ]
    summary = summarize_run(run(windows, [move(T0 + 3 * MIN, sessions=7)]), window_s=60)
    bundle, broker = summary.overloads
    assert (bundle.subject_kind, bundle.subject) == (SUBJECT_BUNDLE, f"c/{BUNDLE}")
    assert (bundle.start_ms, bundle.last_ms, bundle.recovered_ms) == (
        T0 + MIN,
        T0 + 3 * MIN,
        T0 + 4 * MIN,
    )
    assert bundle.time_to_action_s == 120.0
    assert (broker.subject_kind, broker.subject) == (SUBJECT_BROKER, "c/b1")
    assert broker.time_to_action_s == 120.0  # the move left b1
    assert summary.bundle_reaction.median_time_to_action_s == 120.0
    assert summary.broker_reaction.max_time_to_action_s == 120.0
    assert (summary.moves, summary.sessions_moved) == (1, 7)


def test_actions_that_do_not_touch_the_overload_leave_it_never_acted_on() -> None:
    windows = [
        window(T0, {"c/b1": 0.9}, {f"c/{BUNDLE}": 1.4}),
        window(T0 + MIN, {"c/b1": 0.9}, {f"c/{BUNDLE}": 1.4}),
        window(T0 + 2 * MIN, {"c/b1": 0.5}),  # both recovered on their own
    ]
    actions = [
        split(T0 - MIN),  # before the overload
        move(T0 + 30_000, subject="tenant/ns/0x80000000_0xffffffff", source="b3"),  # others
        offload(T0 + 30_000),  # storage, not traffic
        split(T0 + 30_000, cluster="other"),  # another cluster's bundle of the same name
        move(T0 + 2 * MIN),  # at the recovery: too late
    ]
    summary = summarize_run(run(windows, actions), window_s=60)
    assert [o.first_action_ms for o in summary.overloads] == [None, None]
    assert summary.bundle_reaction.never_acted_on == 1
    assert summary.broker_reaction.never_acted_on == 1
    assert summary.broker_reaction.median_time_to_action_s is None
    assert (summary.splits, summary.moves, summary.offloads) == (2, 2, 1)


def test_a_split_in_its_cluster_acts_on_a_broker_and_the_action_in_the_first_window_is_0_s() -> (
    None
):
    windows = [window(T0, {"c/b1": 0.9}), window(T0 + MIN, {"c/b1": 0.9})]
    overloads = find_overloads(
        windows, [split(T0 + MIN, subject="tenant/ns/0x80000000_0xffffffff")]
    )
    assert overloads[0].time_to_action_s == 60.0
    assert overloads[0].recovered_ms is None  # still over when the replay ends
    assert find_overloads(windows, [move(T0)])[0].time_to_action_s == 0.0


def test_a_subject_over_twice_is_two_overloads() -> None:
    windows = [
        window(T0, {"c/b1": 0.9}),
        window(T0 + MIN, {"c/b1": 0.5}),
        window(T0 + 2 * MIN, {"c/b1": 0.95}),
        window(T0 + 3 * MIN, {"c/b1": 0.91}),
    ]
    first, second = find_overloads(windows, [move(T0 + 3 * MIN)])
    assert (first.start_ms, first.last_ms, first.first_action_ms) == (T0, T0, None)
    assert (second.start_ms, second.last_ms, second.peak) == (T0 + 2 * MIN, T0 + 3 * MIN, 0.95)
    assert second.time_to_action_s == 60.0


def test_median_and_max_over_the_overloads_acted_on() -> None:
    windows = [window(T0 + i * MIN, {f"c/b{j}": 0.9 for j in range(4)}) for i in range(6)]
    actions = [
        move(T0 + MIN, source="b0"),
        move(T0 + 2 * MIN, source="b1"),
        move(T0 + 5 * MIN, source="b2"),
    ]
    figures = reaction(find_overloads(windows, actions))
    assert (figures.overloads, figures.acted_on, figures.never_acted_on) == (4, 3, 1)
    assert figures.median_time_to_action_s == 120.0
    assert figures.max_time_to_action_s == 300.0
    even = reaction(find_overloads(windows, actions[:2]))
    assert even.median_time_to_action_s == 90.0  # the mean of 60 and 120


def test_differing_hours_rank_by_broker_and_bundle_minutes_and_actions() -> None:
    def day(over_in_hour0: int, actions_in_hour2: int, policy: str) -> PolicyRun:
        windows = []
        for hour in range(3):
            for minute in range(60):
                at = T0 + hour * HOUR_MS + (minute + 1) * MIN  # ends after the hour's start
                over = hour == 0 and minute < over_in_hour0
                windows.append(window(at - 1, {"c/b1": 0.9 if over else 0.5}))
        actions = [split(T0 + 2 * HOUR_MS + i * MIN) for i in range(actions_in_hour2)]
        actions += [split(T0 + HOUR_MS)]  # both act once in hour 1: no difference there
        return run(windows, actions, policy)

    both = result(day(0, 0, "ours"), day(30, 1, "pulsar"))
    hours = differing_hours(both)
    # Hour 0: 30 broker-minutes against 0 -> 30; hour 2: one action against none -> 1.
    assert [(h.hour_start_ms, h.score) for h in hours] == [(T0, 30.0), (T0 + 2 * HOUR_MS, 1.0)]
    assert [c.broker_minutes_over for c in hours[0].per_policy] == [0.0, 30.0]
    assert [c.actions for c in hours[1].per_policy] == [0, 1]
    assert differing_hours(both, top=1) == hours[:1]
    # One policy alone differs from nothing.
    assert differing_hours(result(day(30, 1, "pulsar"))) == ()
    assert summarize(both).top_hours == hours


def first_action_by_scan(overload, actions) -> int | None:
    """The module docstring's rule, read literally: a scan of every action."""
    cluster, _, name = overload.subject.partition("/")
    times = []
    for a in actions:
        if a.cluster != cluster or a.at_ms < overload.start_ms:
            continue
        if overload.recovered_ms is not None and a.at_ms >= overload.recovered_ms:
            continue
        if overload.subject_kind == SUBJECT_BUNDLE:
            touches = a.kind in (ActionKind.SPLIT, ActionKind.MOVE) and a.subject == name
        else:
            touches = a.kind == ActionKind.SPLIT or (
                a.kind == ActionKind.MOVE and a.source_broker == name
            )
        if touches:
            times.append(a.at_ms)
    return min(times, default=None)


bundles = st.sampled_from(["t/n/0x0_0x8", "t/n/0x8_0xf"])
brokers = st.sampled_from(["b1", "b2"])
clusters = st.sampled_from(["c", "d"])
actions_st = st.lists(
    st.builds(
        ReplayAction,
        # Mostly on window ends (the edges the rule is about), sometimes between them.
        at_ms=st.integers(-1, 12).map(lambda m: T0 + m * MIN)
        | st.integers(T0 - MIN, T0 + 12 * MIN),
        cluster=clusters,
        kind=st.sampled_from(list(ActionKind)),
        subject=bundles,
        source_broker=st.none() | brokers,
    ),
    max_size=12,
)
windows_st = st.lists(
    st.tuples(
        st.dictionaries(
            st.tuples(clusters, brokers).map("/".join), st.sampled_from([0.5, 0.85, 0.9])
        ),
        st.dictionaries(st.tuples(clusters, bundles).map("/".join), st.sampled_from([1.0, 1.5])),
    ),
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(windows_st, actions_st)
def test_the_first_action_is_the_rule_read_literally(raw_windows, actions) -> None:
    windows = [window(T0 + i * MIN, b, u) for i, (b, u) in enumerate(raw_windows)]
    overloads = find_overloads(windows, actions)
    for overload in overloads:
        assert overload.first_action_ms == first_action_by_scan(overload, actions)
    # Every window's subjects over are in exactly one overload.
    covered = {(o.subject, t) for o in overloads for t in range(o.start_ms, o.last_ms + 1, MIN)}
    over = {
        (k, w.window_end_ms)
        for w in windows
        for k, v in [*w.broker_load.items(), *w.bundles_over.items()]
        if v >= (0.85 if k.count("/") == 1 else 1.0)
    }
    assert covered == over
