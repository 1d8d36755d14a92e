"""Topic and bundle loads: in + out sums, sessions, roll-up and completeness."""

from __future__ import annotations

import pytest

from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad, TopicLoad, roll_up

BUNDLE = BundleRange(0, 0x40000000)


def test_topic_load_sums_in_and_out() -> None:
    t = TopicLoad("persistent://t/ns/x", 5, 10.0, 2.5, 100.0, 50.0, 2, 3)
    assert (t.msg_rate, t.throughput_bytes, t.sessions) == (12.5, 150.0, 5)


def test_roll_up_sums_topics() -> None:
    topics = (
        TopicLoad("a", 1, 1.0, 2.0, 10.0, 20.0, 1, 0),
        TopicLoad("b", 2, 3.0, 4.0, 30.0, 40.0, 0, 2),
    )
    load = roll_up(cluster="c", namespace="t/ns", bundle=BUNDLE, window_end_ms=7, topics=topics)
    assert (load.msg_rate_in, load.msg_rate_out, load.msg_rate) == (4.0, 6.0, 10.0)
    assert load.throughput_bytes == 100.0
    assert (load.topic_count, load.session_count) == (2, 3)
    assert load.completeness == 1.0


@pytest.mark.parametrize(
    ("reported", "known", "completeness"),
    [(0, 0, 1.0), (5, 10, 0.5), (10, 10, 1.0), (12, 10, 1.0), (0, 4, 0.0)],
    ids=str,
)
def test_completeness(reported: int, known: int, completeness: float) -> None:
    load = BundleLoad("c", "t/ns", BUNDLE, 0, reported_topics=reported, known_topics=known)
    assert load.completeness == completeness


def test_roll_up_with_known_topics() -> None:
    load = roll_up(
        cluster="c",
        namespace="t/ns",
        bundle=BUNDLE,
        window_end_ms=0,
        topics=(TopicLoad("a", 1),),
        known_topics=4,
    )
    assert load.completeness == 0.25
