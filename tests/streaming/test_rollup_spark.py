"""On real Spark, the bundles the driver reports equal the reference roll-up, completeness included.

A property test: topics of two namespaces on two clusters report in some minutes and are
silent in others, and one bucket goes silent altogether (so windows close in a bucket with
no packs of its own, whose known topics still count), with random layouts, bucket counts,
batch sizes and namespace totals. For every report, the reference
(`tests.streaming.rollup_reference`) is computed from the report's own per-topic rows (exact
floats) and the topics known by then (every window with data that ended within the TTL before
the reported one), and must equal what the executors' partials merged in the driver gave, field
for field.
"""

from __future__ import annotations

import tempfile
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from balancer.core.buckets import topic_bucket
from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.report import BatchReport, StaticLayouts
from balancer.core.topics import parse_topic
from streaming.spark.job import run_available
from streaming.stage.closing import KNOWN_TTL_WINDOWS
from tests.kafka_broker import Broker
from tests.stream_events import BASE_MS, encode, event, expected_windows, local_settings
from tests.streaming.rollup_reference import SeenTopics, TopicWindow, roll_up_window

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

WINDOW_MS, SLIDE_MS, WATERMARK_MS = 120_000, 60_000, 60_000
NAMESPACES = [("c1", "t/a"), ("c1", "t/b"), ("c2", "t/a")]
MINUTES = 7


class Recorder:
    def __init__(self, offload_min_bytes: int | None) -> None:
        self.offload_min_bytes = offload_min_bytes
        self.reports: list[BatchReport] = []
        self.from_stage: dict[int, bool] = {}  # batch id -> partials came with the stage

    def wants_topics(self, bundle: BundleLoad) -> bool:
        return True

    def handle(self, report: BatchReport) -> None:
        self.reports.append(report)

    def partials_source(self, batch_id: int, *, from_stage: bool) -> None:
        self.from_stage[batch_id] = from_stage


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    num_buckets = draw(st.integers(2, 4))
    topics = [
        (cluster, f"persistent://{ns}/topic-{i}")
        for cluster, ns in NAMESPACES
        for i in range(draw(st.integers(1, 5)))
    ]
    # The bucket of the first topic goes silent after minute 2, while the first namespace
    # (one bundle) goes on reporting from another bucket: later windows close in a bucket
    # with no packs, whose known topics must still count toward completeness.
    first = topics[0][1]
    silent_bucket = topic_bucket(first, num_buckets)
    extra = (f"persistent://t/a/other-{i}" for i in range(1000))
    other = next(t for t in extra if topic_bucket(t, num_buckets) != silent_bucket)
    topics.insert(1, ("c1", other))
    events = []
    for minute in range(MINUTES):
        for n, (cluster, topic) in enumerate(topics):
            silent = topic_bucket(topic, num_buckets) == silent_bucket and minute > 2
            # In every third minute every topic not silent reports.
            if silent or (minute % 3 and n != 1 and not draw(st.booleans())):
                continue
            events.append(
                event(
                    topic,
                    BASE_MS + minute * 60_000 + n * 10,
                    cluster=cluster,
                    rate_in=draw(st.floats(0, 1e6)),
                    tput_out=draw(st.floats(0, 1e9)),
                    storage=draw(st.integers(0, 10**6)),
                    producers=draw(st.integers(0, 3)),
                )
            )
    boundaries = {
        key: tuple(sorted({0, 0xFFFFFFFF, *draw(st.lists(st.integers(1, 0xFFFFFFFE), max_size=4))}))
        for key in NAMESPACES[1:]
    }
    boundaries[NAMESPACES[0]] = (0, 0xFFFFFFFF)  # the silent topic shares the bundle
    return {
        "events": events,
        "layouts": {key: NamespaceBundles(key[1], b) for key, b in boundaries.items()},
        "known_total": draw(st.one_of(st.none(), st.integers(0, 20))),
        "num_buckets": num_buckets,
        "max_offsets": draw(st.integers(8, 40)),
        "offload_min_bytes": draw(st.one_of(st.none(), st.integers(0, 10**6))),
    }


def reference(report: BatchReport, scenario: dict[str, Any]) -> list[BundleLoad]:
    end = report.window_end_ms
    seen = SeenTopics(KNOWN_TTL_WINDOWS * WINDOW_MS)
    expected = expected_windows(scenario["events"], window_ms=WINDOW_MS, slide_ms=SLIDE_MS)
    for cluster, topic, window_end in expected:
        if window_end <= end:  # every window up to the reported one has closed by now
            name = parse_topic(topic)
            load = TopicLoad(topic, hash_position(topic))
            seen.observe([TopicWindow(cluster, name.namespace_name, window_end, load)])
    seen.expire(end)
    newest = [TopicWindow(b.cluster, b.namespace, end, t) for b in report.bundles for t in b.topics]
    total = scenario["known_total"]
    return roll_up_window(
        newest,
        window_end_ms=end,
        layouts=scenario["layouts"],
        seen=seen,
        namespace_known={key: total for key in NAMESPACES},
    )


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_spark_bundles_equal_the_reference(
    kafka: Broker, spark: Any, scenario: dict[str, Any]
) -> None:
    work = Path(tempfile.mkdtemp(prefix="rollup-spark-"))
    # One partition: events arrive in event-time order, so none is late.
    topic = kafka.new_topic(partitions=1, prefix="stats")
    kafka.produce(topic, [encode(e) for e in scenario["events"]])
    stream = local_settings(
        kafka.bootstrap_servers,
        topic,
        work,
        num_buckets=scenario["num_buckets"],
        max_offsets_per_trigger=scenario["max_offsets"],
        window_s=WINDOW_MS // 1000,
        slide_s=SLIDE_MS // 1000,
        watermark_s=WATERMARK_MS // 1000,
    )
    total = scenario["known_total"]
    layouts = StaticLayouts(
        scenario["layouts"], known={} if total is None else dict.fromkeys(NAMESPACES, total)
    )
    handler = Recorder(scenario["offload_min_bytes"])
    run_available(spark, stream, handler, layouts, timeout_s=300)

    reported = [r for r in handler.reports if r.window_end_ms]
    assert reported, "no window closed"
    expected = expected_windows(scenario["events"], window_ms=WINDOW_MS, slide_ms=SLIDE_MS)
    for report in reported:
        want = reference(report, scenario)
        assert list(report.bundles) == want  # all but topics (compare=False), floats exactly
        for bundle in report.bundles:
            for t in bundle.topics:  # the topic rows themselves: the plain-Python values
                values = expected[(bundle.cluster, t.topic, report.window_end_ms)]
                assert t.msg_rate_in == pytest.approx(values.msg_rate_in)
                assert t.storage_size == values.storage_size
        threshold = scenario["offload_min_bytes"]
        want_large = [
            (b.cluster, t)
            for b in report.bundles
            for t in b.topics
            if threshold is not None and t.storage_size >= threshold
        ]
        assert sorted(report.large_topics, key=repr) == sorted(want_large, key=repr)
    # The silent bucket's topics keep counting toward completeness in the later windows.
    assert any(b.known_topics > b.reported_topics for r in reported for b in r.bundles)
    # The first close rolls up in a job of its own. A later one whose namespaces all
    # reported in the close before comes with the stage's partials: the driver handed the
    # stage those layouts (static here), so it needs no job for them.
    assert not handler.from_stage[reported[0].batch_id]
    for before, report in pairwise(reported):
        if namespaces(report) <= namespaces(before):
            assert handler.from_stage[report.batch_id], handler.from_stage


def namespaces(report: BatchReport) -> set[tuple[str, str]]:
    return {(b.cluster, b.namespace) for b in report.bundles}
