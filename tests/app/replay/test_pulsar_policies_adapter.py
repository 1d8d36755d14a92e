"""Pulsar's policies driven by the engine: each window built once for all of them, every
topic with the recorded owner of its bundle as its broker; each policy on its own layout."""

from __future__ import annotations

import pyarrow as pa
import pytest

from balancer.app.config import BalancerConfig
from balancer.app.replay.engine import run_replay
from balancer.app.replay.pulsar_policies import (
    PULSAR_POLICIES,
    SharedWindows,
    pulsar_replay_policies,
)
from balancer.app.replay.windows import ClosedWindow, StreamCounts
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad
from balancer.core.replay.result import ReplayResult
from streaming.stage.partials import TOPIC_COLUMNS, TOPIC_ROWS_SCHEMA
from tests.app.replay.test_ours import BASE_MS, INITIAL, MIN, NS, contexts, topics, windows


def config() -> BalancerConfig:
    return BalancerConfig.model_validate(
        {"clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:9"}]}
    )


def test_a_window_is_built_once_with_the_recorded_owners_as_brokers() -> None:
    shared = SharedWindows()
    for ctx in contexts(2):
        shared.observe(ctx)
    (window, *_) = windows(1)
    built = shared.of(window)
    assert shared.of(window) is built  # the second policy reads the same
    topics = built.namespaces[("c1", NS)].topics
    assert topics and {t.broker for t in topics} == {"b1:8080"}  # b1 owns every bundle
    assert built.contexts["c1"].round_ms == BASE_MS + MIN  # the newest round by the end


def test_pulsar_policies_see_every_window_with_the_recorded_loads() -> None:
    policies = pulsar_replay_policies(
        ["pulsar-modular-threshold", "pulsar-extensible-transfer"], config()
    )
    result = run_replay(
        source="test", windows=windows(5), contexts=contexts(6), policies=policies,
        counts=StreamCounts(), window_s=60,
    )  # fmt: skip
    assert [r.policy for r in result.runs] == [
        "pulsar-modular-threshold", "pulsar-extensible-transfer",
    ]  # fmt: skip
    assert (result.clusters, result.topics) == (("c1",), len(topics()))  # each topic once
    for run in result.runs:
        assert [w.window_end_ms for w in run.windows] == [BASE_MS + k * MIN for k in range(1, 6)]
        first = run.windows[0]
        # the recorded reports, as long as the policy's layout equals the recording's
        assert first.broker_load["c1/b1:8080"] == 0.95
        assert first.bundles == INITIAL.num_bundles
    first, second = policies
    assert first.layout is not second.layout  # each changes its own


def test_each_topic_takes_the_recorded_owner_of_its_bundle_as_found_topic_by_topic() -> None:
    """The brokers are given bundle by bundle; they are those `owner_of` finds per topic,
    with the bundles split in the recording and owned by three brokers (one owns none)."""
    from dataclasses import replace

    from balancer.core.replay.layout import ReplayLayout
    from balancer.core.replay.window import ReplayWindow, WindowTopic

    layout = INITIAL.split(INITIAL.bundles[1], [INITIAL.bundles[1].lower + 0x100000])[0]
    keys = [b.key(NS) for b in layout.bundles]
    ctx = contexts(1)[0]
    b1, b2 = ctx.reports
    ctx = replace(ctx, reports=(
        replace(b1, bundles=tuple(keys[:2])), replace(b2, bundles=tuple(keys[2:4])),
    ))  # fmt: skip
    # the last bundle, keys[4], is owned by no broker
    shared = SharedWindows()
    shared.observe(ctx)
    (window, *_) = windows(1)
    built = shared.of(window)
    recorded = ReplayLayout.from_contexts([ctx])
    expected = ReplayWindow.build(
        window.end_ms,
        [
            WindowTopic(c, load, recorded.owner_of(c, ns, load.position) or "")
            for c, ns, load in window.topic_loads()
        ],
        {"c1": ctx},
    )
    assert built.namespaces == expected.namespaces
    assert {t.broker for t in built.namespaces[("c1", NS)].topics} == {"b1:8080", "b2:8080", ""}


def test_pulsar_policies_read_the_windows_columns_without_an_object_per_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shared window is built from the closed rows' columns: no `TopicLoad` per topic
    (half a replay's time at 20,000 topics when it was); the policies' results are those of
    the window built from topic objects."""

    def replay_three_windows() -> ReplayResult:  # fresh windows and policies each time
        return run_replay(
            source="test", windows=windows(3), contexts=contexts(4),
            policies=pulsar_replay_policies(list(PULSAR_POLICIES), config()),
            counts=StreamCounts(), window_s=60,
        )  # fmt: skip

    expected = replay_three_windows()

    def no_objects(self: ClosedWindow) -> list[tuple[str, str, TopicLoad]]:
        raise AssertionError("a TopicLoad per topic was built")

    monkeypatch.setattr(ClosedWindow, "topic_loads", no_objects)
    result = replay_three_windows()
    assert result == expected


def _rows(topics: list[tuple[str, TopicLoad]]) -> pa.Table:
    """Closed topic rows (TOPIC_ROWS_SCHEMA) of (cluster, load), in the order given."""
    columns: dict[str, list[object]] = {name: [] for name in TOPIC_ROWS_SCHEMA.names}
    for cluster, load in topics:
        columns["window_end"].append(BASE_MS + MIN)
        columns["cluster"].append(cluster)
        columns["namespace"].append(load.topic.split("://", 1)[1].rsplit("/", 1)[0])
        columns["samples"].append(1)
        for name in TOPIC_COLUMNS:
            columns[name].append(getattr(load, name))
    return pa.table(columns).cast(TOPIC_ROWS_SCHEMA)


def test_the_columns_of_several_clusters_and_namespaces_are_those_of_the_topic_objects() -> None:
    from balancer.app.replay.pulsar_policies import namespace_columns
    from balancer.core.replay.layout import ReplayLayout
    from balancer.core.replay.window import ReplayWindow, WindowTopic

    names = ["a/x", "a/y", "b/x"]
    loads = [
        (cluster, TopicLoad(t, hash_position(t), float(i), 1.0, 2.0, 3.0, 1, 2, 3, 4, 5))
        for i, (cluster, ns) in enumerate(
            (c, n) for _ in range(7) for c in ("c2", "c1") for n in names
        )
        for t in [f"persistent://{ns}/t{i}"]
    ]
    closed = ClosedWindow(BASE_MS + MIN, pa.table({"payload": pa.array([], pa.binary())}))
    object.__setattr__(closed, "_table", _rows(loads[::-1]))  # unsorted, as buckets give them
    ctx = contexts(1)[0]  # c1's t/ns only: the others' topics have no recorded owner
    recorded = ReplayLayout.from_contexts([ctx])
    got = namespace_columns(closed.topic_rows(), recorded)
    expected = ReplayWindow.build(
        closed.end_ms, [WindowTopic(c, load, "") for c, load in loads], {}
    ).namespaces
    assert list(got) == sorted(expected) and got == expected
    with pytest.raises(ValueError, match="not sorted"):
        namespace_columns(_rows(loads), recorded)  # rows not sorted: refused, not misread
