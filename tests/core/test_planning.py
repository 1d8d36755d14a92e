"""The plan's window: samples averaged as the stream's windows do, then the controller's rules."""

from __future__ import annotations

from balancer.core.bundles import BundleRange
from balancer.core.detect import DetectionSettings
from balancer.core.events import TopicStatsEvent
from balancer.core.limits import BundleLimits
from balancer.core.planning import DENIED, TopicSample, make_plan, window_loads
from balancer.core.thresholds import NamespacePolicy, Thresholds

B = BundleRange(0, 0x80000000)


def sample(topic: str, at_ms: int, rate: float, storage: int = 0) -> TopicSample:
    event = TopicStatsEvent(
        cluster="east",
        topic=f"persistent://acme/ns/{topic}",
        timestamp_ms=at_ms,
        msgRateIn=rate,
        msgRateOut=0.0,
        msgThroughputIn=rate * 10,
        msgThroughputOut=0.0,
        storageSize=storage,
        backlogSize=0,
        offloadedStorageSize=0,
        producerCount=1,
        consumerCount=at_ms // 1000,
    )
    return TopicSample("acme/ns", B, event)


def test_rates_are_averaged_and_counts_taken_from_the_newest_sample() -> None:
    [bundle] = window_loads(
        [
            sample("a", 1000, 100.0, storage=5),
            sample("a", 2000, 300.0, storage=7),
            sample("b", 2000, 50.0),
        ]
    )
    assert bundle.window_end_ms == 2000
    a = next(t for t in bundle.topics if t.topic.endswith("/a"))
    assert a.msg_rate_in == 200.0 and a.msg_throughput_in == 2000.0
    assert a.storage_size == 7 and a.consumer_count == 2
    assert bundle.msg_rate_in == 250.0 and bundle.topic_count == 2


def test_one_window_reaches_the_hit_count_and_the_allow_list_applies() -> None:
    thresholds = Thresholds(defaults=NamespacePolicy(limits=BundleLimits(max_msg_rate=100.0)))
    bundles = window_loads([sample(f"t{i}", 1000, 40.0) for i in range(6)])
    settings = DetectionSettings(hit_count_threshold=5)
    plan = make_plan(
        bundles, thresholds=thresholds, detection=settings, allows=lambda ns: True, now_ms=0
    )
    [split] = plan.splits
    assert split.bundle == B and plan.hit_count_threshold == 5 and plan.has_proposals
    denied = make_plan(
        bundles, thresholds=thresholds, detection=settings, allows=lambda ns: False, now_ms=0
    )
    assert denied.splits == () and not denied.has_proposals
    assert [s.reason for s in denied.skipped] == [DENIED]
