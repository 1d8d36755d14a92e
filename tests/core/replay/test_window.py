"""A replay window: topics grouped by namespace and sorted by position, names that are no
topic counted, bundle loads rolled up once for every policy."""

from __future__ import annotations

from balancer.core.bundles import BundleRange
from balancer.core.load import TopicLoad
from balancer.core.replay.window import ReplayWindow, WindowTopic
from tests.core.replay.fixtures import topic


def test_topics_are_grouped_by_namespace_sorted_by_position_and_bad_names_counted() -> None:
    topics = [topic(f"t/ns/x-{i}", msg_in=1.0, bytes_in=1.0) for i in range(20)]
    topics.append(topic("u/other/y", msg_in=1.0, bytes_in=1.0))
    bad = TopicLoad(topic="persistent://only-tenant", position=5)
    window = ReplayWindow.build(
        60_000, [WindowTopic("c", t, "b1:8080") for t in [*topics, bad]], {}
    )
    assert window.rejected_topics == 1
    assert set(window.namespaces) == {("c", "t/ns"), ("c", "u/other")}
    ns = window.namespaces[("c", "t/ns")]
    assert list(ns.positions) == sorted(t.position for t in topics[:20])
    assert sum(1 for _ in window.topics()) == 21


def test_a_bundle_holds_the_topics_of_its_range_the_last_one_0xffffffff_too() -> None:
    edge = TopicLoad(topic="persistent://t/ns/edge", position=0xFFFFFFFF, msg_rate_in=3.0)
    low = TopicLoad(topic="persistent://t/ns/low", position=0, msg_rate_in=2.0)
    window = ReplayWindow.build(0, [WindowTopic("c", t, "b") for t in (edge, low)], {})
    upper = BundleRange(0x80000000, 0xFFFFFFFF)
    load = window.bundle_load("c", "t/ns", upper)
    assert load is not None and load.topic_count == 1 and load.msg_rate_in == 3.0
    assert window.bundle_load("c", "t/ns", upper) is load  # rolled up once
    assert window.bundle_load("c", "t/ns", BundleRange(1, 0x80000000)) is None
