"""With load reports read (moves on), the collector publishes one context record per round
and cluster: the round's time on its grid and the load reports read in it, after the
round's stats; a failed publish is counted and logged and never stops a round (issue 44)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from balancer.collector.admin import admin_fetch, polling_plan
from balancer.collector.ports import Fetch, Fetched
from balancer.collector.service import Collector
from balancer.collector.sink import KafkaEventSink
from balancer.collector.targets import Target
from balancer.core.broker_load import BrokerLoadReport, LoadSource, Resource, ResourceUsage
from balancer.core.context_record import decode_context
from balancer.core.replay.recording import RoundContext
from balancer.core.round_marker import MARKER_KEY
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.routing import ClusterEndpoint
from balancer.sim.group import RunningPeerGroup
from tests.collector.test_collector_envelopes import Answers, Sample, topics
from tests.collector.test_collector_markers import START_MS, Clocks
from tests.sim.broker_group import NS, one_namespace, started

GRID_MS = (START_MS // 60_000) * 60_000  # the first round's time on the 60 s grid


class Out:
    """The stats sink and the context port, writing into one log (to see the order)."""

    def __init__(self, *, failing: bool = False) -> None:
        self.log: list[tuple[str, bytes, bytes, int | None]] = []
        self.failing = failing

    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
        self.log.append(("stats", key, value, None))

    def flush(self) -> None:
        pass

    def publish_context(self, *, key: bytes, value: bytes, timestamp_ms: int) -> None:
        if self.failing:
            raise ConnectionError("Kafka is away")
        self.log.append(("context", key, value, timestamp_ms))

    def contexts(self) -> list[tuple[bytes, RoundContext, int | None]]:
        return [(k, decode_context(v), t) for kind, k, v, t in self.log if kind == "context"]


def report(cluster: str, broker: str, poll_ms: int, bundles: tuple[str, ...]) -> BrokerLoadReport:
    return BrokerLoadReport(
        cluster=cluster,
        broker=broker,
        timestamp_ms=poll_ms,
        resources={Resource.CPU: ResourceUsage(40.0, 100.0)},
        msg_rate_in=5.0,
        num_bundles=len(bundles),
        bundles=bundles,
    )


def fetch_with_reports(clocks: Clocks, *, reports: bool = True) -> Fetch:
    def fetch(target: Target) -> Fetched:
        assert target.broker is not None
        bundles = (f"acme/{target.broker}/0x00000000_0xffffffff",)
        return Fetched(
            samples=[(t, Sample(1.0)) for t in topics(f"acme/{target.broker}", 2)],
            broker_load=(
                report(target.cluster, target.broker, clocks.clock_ms(), bundles)
                if reports
                else None
            ),
            owned_bundles=frozenset(bundles),
        )

    return fetch


TARGETS = [
    Target("east", broker_id="b1:8080"),
    Target("east", broker_id="b2:8080"),
    Target("west", broker_id="w1:8080"),
]


class Failures(Answers):
    """The metrics port, as far as the context records go: each failure's reason."""

    def __init__(self) -> None:
        super().__init__()
        self.reasons: list[str] = []

    def context_publish_failed(self, reason: str) -> None:
        self.reasons.append(reason)


def collector(fetch: Fetch, out: Out, clocks: Clocks, *, markers: bool = True) -> Collector:
    return Collector(
        targets=TARGETS,
        fetch=fetch,
        sink=out,
        clock_ms=clocks.clock_ms,
        monotonic=clocks.monotonic,
        round_markers=markers,
        contexts=out,
    )


def counted(collector: Collector, metrics: Failures) -> Collector:
    collector.metrics = metrics
    return collector


def test_each_round_publishes_one_context_per_cluster_after_its_stats() -> None:
    clocks, out = Clocks(), Out()
    counts = collector(fetch_with_reports(clocks), out, clocks).run(
        interval_s=60, sleep=clocks.sleep, max_polls=2
    )
    contexts = out.contexts()
    assert [(k, c.cluster, c.round_ms, t) for k, c, t in contexts] == [
        (b"east", "east", GRID_MS, GRID_MS),
        (b"west", "west", GRID_MS, GRID_MS),
        (b"east", "east", GRID_MS + 60_000, GRID_MS + 60_000),
        (b"west", "west", GRID_MS + 60_000, GRID_MS + 60_000),
    ]
    first = contexts[0][1]
    assert [r.broker for r in first.reports] == ["b1:8080", "b2:8080"]
    assert first.reports[0].bundles == ("acme/b1:8080/0x00000000_0xffffffff",)
    assert first.reports[0].timestamp_ms == START_MS  # the poll time, as read
    assert counts.contexts == 4 and not counts.context_failures
    # Each round's contexts come after its stats and its marker, before the next round.
    kinds = [kind if key != MARKER_KEY else "marker" for kind, key, _, _ in out.log]
    assert kinds == (["stats"] * 3 + ["marker"] + ["context"] * 2) * 2


def test_without_round_markers_the_round_time_is_still_on_the_grid() -> None:
    clocks, out = Clocks(), Out()
    collector(fetch_with_reports(clocks), out, clocks, markers=False).run(
        interval_s=60, sleep=clocks.sleep, max_polls=2
    )
    assert [c.round_ms for _, c, _ in out.contexts()] == [
        GRID_MS,
        GRID_MS,
        GRID_MS + 60_000,
        GRID_MS + 60_000,
    ]


def test_no_load_report_read_means_no_context() -> None:
    clocks, out = Clocks(), Out()
    counts = collector(fetch_with_reports(clocks, reports=False), out, clocks).run(
        interval_s=60, sleep=clocks.sleep, max_polls=2
    )
    assert out.contexts() == []
    assert counts.contexts == 0
    assert sum(kind == "stats" for kind, *_ in out.log) == 8  # 3 answers + 1 marker, twice


def test_a_report_without_bundles_takes_the_bundles_the_broker_reported_topics_of() -> None:
    # The extensible load manager's metrics route gives no bundle list.
    clocks, out = Clocks(), Out()

    def fetch(target: Target) -> Fetched:
        assert target.broker is not None
        read = report(target.cluster, target.broker, clocks.clock_ms(), ())
        return Fetched(
            samples=[],
            broker_load=BrokerLoadReport(
                cluster=read.cluster,
                broker=read.broker,
                timestamp_ms=read.timestamp_ms,
                resources=read.resources,
                origin=LoadSource.METRICS,
            ),
            owned_bundles=frozenset(
                {"acme/x/0x80000000_0xffffffff", "acme/x/0x00000000_0x80000000"}
            ),
        )

    collector(fetch, out, clocks).run(interval_s=60, sleep=clocks.sleep, max_polls=1)
    reports = out.contexts()[0][1].reports
    assert reports[0].origin is LoadSource.METRICS
    assert reports[0].bundles == ("acme/x/0x00000000_0x80000000", "acme/x/0x80000000_0xffffffff")


def test_a_failed_publish_is_counted_and_logged_and_the_rounds_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clocks, out = Clocks(), Out(failing=True)
    with caplog.at_level(logging.WARNING, logger="balancer.collector.service"):
        counts = collector(fetch_with_reports(clocks), out, clocks).run(
            interval_s=60, sleep=clocks.sleep, max_polls=2
        )
    assert counts.context_failures == {"east": 2, "west": 2}
    assert counts.contexts == 0
    assert sum(kind == "stats" for kind, *_ in out.log) == 8  # the stats all went
    assert any("context record" in m and "ConnectionError" in m for m in caplog.messages)


def test_a_failed_publish_is_counted_by_reason_in_the_metrics() -> None:
    clocks, out, metrics = Clocks(), Out(failing=True), Failures()
    counted(collector(fetch_with_reports(clocks), out, clocks), metrics).run(
        interval_s=60, sleep=clocks.sleep, max_polls=2
    )
    assert metrics.reasons == ["send_failed"] * 4


def test_a_context_over_the_record_size_is_refused_counted_and_logged_the_others_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 40,000 bundles on one broker of east: a record of about 1.3 MiB, over the 1 MiB a
    # producer of `collector.envelope_max_bytes` takes (it would refuse it every round).
    clocks, out, metrics = Clocks(), Out(), Failures()
    many = tuple(f"acme/n{i // 4}/0x{i % 4:08x}_0x{i % 4 + 1:08x}" for i in range(40_000))
    base = fetch_with_reports(clocks)

    def fetch(target: Target) -> Fetched:
        fetched = base(target)
        if target.broker != "b1:8080":
            return fetched
        big = report(target.cluster, target.broker, clocks.clock_ms(), many)
        return Fetched(samples=fetched.samples, broker_load=big, owned_bundles=frozenset(many))

    with caplog.at_level(logging.WARNING, logger="balancer.collector.service"):
        counts = counted(collector(fetch, out, clocks), metrics).run(
            interval_s=60, sleep=clocks.sleep, max_polls=1
        )
    assert [c.cluster for _, c, _ in out.contexts()] == ["west"]  # east's never handed over
    assert metrics.reasons == ["too_large"]
    assert counts.context_failures == {"east": 1}
    assert any(
        "context record of east" in m and "collector.envelope_max_bytes" in m
        for m in caplog.messages
    )


def test_a_report_with_a_figure_json_cannot_hold_is_counted_as_invalid() -> None:
    clocks, out, metrics = Clocks(), Out(), Failures()
    base = fetch_with_reports(clocks)

    def fetch(target: Target) -> Fetched:
        fetched = base(target)
        if target.cluster != "west" or fetched.broker_load is None:
            return fetched
        load = replace(fetched.broker_load, msg_rate_in=float("nan"))
        return Fetched(fetched.samples, broker_load=load, owned_bundles=fetched.owned_bundles)

    counts = counted(collector(fetch, out, clocks), metrics).run(
        interval_s=60, sleep=clocks.sleep, max_polls=1
    )
    assert metrics.reasons == ["invalid_report"]
    assert counts.context_failures == {"west": 1}
    assert [c.cluster for _, c, _ in out.contexts()] == ["east"]


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("contexts", seed=4, topics=16)) as g:
        yield g


def test_against_the_simulator_each_context_holds_every_broker_and_its_bundles(
    group: RunningPeerGroup,
) -> None:
    with PulsarPeerGroup([ClusterEndpoint("a", group.admin_urls["a"])]) as admin:
        targets, listers = polling_plan([_Cluster("a", group.admin_urls["a"])], admin)
        out = Out()
        Collector(
            targets=targets,
            fetch=admin_fetch(admin, load_reports=True),
            sink=out,
            broker_listers=listers,
            contexts=out,
        ).run(interval_s=60, sleep=lambda _s: None, max_polls=1)
        (key, context, stamp), *more = out.contexts()
        assert not more and key == b"a" and stamp == context.round_ms
        assert context.round_ms % 60_000 == 0
        assert sorted(r.broker for r in context.reports) == sorted(
            u.removeprefix("http://") for u in group.broker_urls["a"]
        )
        owned = sorted(b for r in context.reports for b in r.bundles)
        assert owned == sorted(f"{NS}/{b}" for b in _bundles(admin))
        assert all(r.origin is LoadSource.LOAD_REPORT for r in context.reports)


def _bundles(admin: PulsarPeerGroup) -> list[str]:
    return [str(b) for b in admin.get_bundles(NS, cluster="a").bundles]


class _Cluster:
    def __init__(self, name: str, admin_url: str) -> None:
        self.name = name
        self.admin_url = admin_url
        self.brokers: tuple[str, ...] = ()


class _Future:
    def __init__(self) -> None:
        self.errbacks: list[Callable[[Exception], None]] = []

    def add_errback(self, fn: Callable[[Exception], None]) -> None:
        self.errbacks.append(fn)


class _Producer:
    """What KafkaEventSink.publish_context asks of a KafkaProducer."""

    def __init__(self) -> None:
        self.config = {"enable_idempotence": False}
        self.sent: list[tuple[str, bytes, bytes, int]] = []
        self.futures: list[_Future] = []

    def send(self, topic: str, *, key: bytes, value: bytes, timestamp_ms: int) -> _Future:
        self.sent.append((topic, key, value, timestamp_ms))
        self.futures.append(_Future())
        return self.futures[-1]


class _Listener:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def context_publish_failed(self, reason: str) -> None:
        self.reasons.append(reason)


def test_the_sink_sends_contexts_stamped_with_their_round_and_counts_a_lost_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = _Producer()
    listener = _Listener()
    sink = KafkaEventSink(producer, "stats", listener=listener)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):  # no context topic set: the collector counts it
        sink.publish_context(key=b"a", value=b"{}", timestamp_ms=GRID_MS)
    sink.context_topic = "ctx"
    sink.publish_context(key=b"a", value=b"{}", timestamp_ms=GRID_MS)
    assert producer.sent == [("ctx", b"a", b"{}", GRID_MS)]
    with caplog.at_level(logging.WARNING, logger="balancer.collector.sink"):
        for errback in producer.futures[0].errbacks:
            errback(TimeoutError("no ack"))
    assert sink.counts.contexts_lost == 1
    assert sink.counts.failed == 0  # the stats' own counts are not touched
    assert any("context record was not delivered" in m for m in caplog.messages)
    assert listener.reasons == ["not_delivered"]
    sink.producer = None  # discarded after a failure, not rebuilt yet
    with pytest.raises(ConnectionError):
        sink.publish_context(key=b"a", value=b"{}", timestamp_ms=GRID_MS)


def test_the_sink_counts_a_context_the_broker_refuses_as_too_large() -> None:
    # The broker's own limit (message.max.bytes, the topic's max.message.bytes) may be lower
    # than the producer's: Kafka then fails the delivery with MESSAGE_SIZE_TOO_LARGE.
    from kafka.errors import MessageSizeTooLargeError

    producer = _Producer()
    listener = _Listener()
    sink = KafkaEventSink(producer, "stats", listener=listener)  # type: ignore[arg-type]
    sink.context_topic = "ctx"
    sink.publish_context(key=b"a", value=b"{}", timestamp_ms=GRID_MS)
    for errback in producer.futures[0].errbacks:
        errback(MessageSizeTooLargeError("refused"))
    assert listener.reasons == ["too_large"]
    assert sink.counts.contexts_lost == 1


def test_the_sink_says_a_record_the_producer_refuses_for_its_size_is_too_large() -> None:
    from kafka.errors import MessageSizeTooLargeError

    from balancer.collector.ports import ContextTooLarge

    class TooSmall(_Producer):
        def send(self, topic: str, *, key: bytes, value: bytes, timestamp_ms: int) -> _Future:
            raise MessageSizeTooLargeError("over max_request_size")

    sink = KafkaEventSink(TooSmall(), "stats")  # type: ignore[arg-type]
    sink.context_topic = "ctx"
    with pytest.raises(ContextTooLarge):
        sink.publish_context(key=b"a", value=b"{}", timestamp_ms=GRID_MS)
