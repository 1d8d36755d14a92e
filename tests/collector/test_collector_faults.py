"""Issue 32's collector defects: no cluster or broker may silently drop out of polling.

- A slow or blackholed cluster delays only itself (rounds are concurrent, to a deadline).
- Brokers are listed again every round: a cluster down at start, a broker added later.
- Every failed poll is counted by cluster, broker and reason; 401/403 mark the cluster
  unauthorized; the last read per cluster and broker is a gauge that follows the brokers.

Fetches are plain functions with events and fake clocks: no sleeps decide an outcome.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import pytest
from prometheus_client import CollectorRegistry

from balancer.collector.failures import PollFailure, classify
from balancer.collector.ports import Fetched
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.errors import (
    ForbiddenError,
    InvalidResponseError,
    ServerError,
    UnauthorizedError,
    UnavailableError,
)
from tests.collector.test_collector_envelopes import Sample, Sink, topics

EAST = Target("east", "http://e1:8080")
WEST = Target("west", "http://w1:8080")
START_MS = 1_795_000_000_000  # 2026-11-18


def answer(cluster: str, n: int = 2) -> Fetched:
    return Fetched(samples=[(t, Sample(1.0)) for t in topics(f"{cluster}/ns", n)])


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: no fetch thread of a test outlives it."""
    event = threading.Event()
    yield event
    event.set()


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = START_MS
        self.lock = threading.Lock()

    def ms(self) -> int:
        with self.lock:
            return self.now_ms

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now_ms += int(seconds * 1000)


def test_a_slow_cluster_does_not_delay_the_polls_of_another() -> None:
    # East's fetch takes two minutes (fake time), but only once west's has been made: polled
    # one after another, west would be polled two minutes late, with a stale event time.
    clock = FakeClock()
    west_done = threading.Event()

    def fetch(target: Target) -> Fetched:
        if target.cluster == "west":
            west_done.set()
            return answer("west")
        west_done.wait(timeout=5)
        clock.advance(120)
        return answer("east")

    sink = Sink()
    collector = Collector(targets=[EAST, WEST], fetch=fetch, sink=sink, clock_ms=clock.ms)
    assert collector.poll_once() == []
    times = {e.cluster: e.timestamp_ms for e in sink.events()}
    assert times["west"] == START_MS  # asked at the round's start, not after east
    assert times["east"] == START_MS  # the event time is when its fetch started


def test_a_blackholed_broker_times_out_at_the_deadline_and_is_not_asked_twice(
    release: threading.Event,
) -> None:
    calls: list[Target] = []

    def fetch(target: Target) -> Fetched:
        calls.append(target)
        if target == EAST:
            release.wait()  # never answers while the test runs
        return answer(target.cluster)

    sink = Sink()
    collector = Collector(targets=[EAST, WEST], fetch=fetch, sink=sink)
    assert collector.poll_once(deadline_s=0.3) == [EAST]
    assert {e.cluster for e in sink.events()} == {"west"}
    # The next round: west is read again, east is still busy and is not asked again.
    assert collector.poll_once(deadline_s=0.3) == [EAST]
    assert calls.count(EAST) == 1 and calls.count(WEST) == 2
    assert collector.counts.failure_reasons == {("east", "e1:8080", "timeout"): 2}
    assert ("west", "w1:8080") in collector.counts.broker_last_success_ms
    assert ("east", "e1:8080") not in collector.counts.broker_last_success_ms


def test_run_keeps_the_other_clusters_polls_on_schedule_while_one_hangs(
    release: threading.Event,
) -> None:
    # Four rounds of 60 s (fake time; the round's deadline is the interval): west is read
    # in every round although east never answers.
    clock = {"t": 0.0}
    ticking = threading.Event()

    def fetch(target: Target) -> Fetched:
        if target == EAST:
            release.wait()
        return answer(target.cluster)

    def monotonic() -> float:
        return clock["t"]

    def sleep(seconds: float) -> None:
        clock["t"] += seconds

    sink = Sink()
    collector = Collector(
        targets=[EAST, WEST], fetch=fetch, sink=sink, monotonic=monotonic, round_deadline_s=0.2
    )
    # A round waits on the fake clock: advance it from the side while east hangs.
    ticker = threading.Thread(target=_tick, args=(clock, ticking), daemon=True)
    ticker.start()
    try:
        counts = collector.run(interval_s=60, retry_s=25, sleep=sleep, max_polls=4)
    finally:
        ticking.set()
    west_events = [e for e in sink.events() if e.cluster == "west"]
    assert len(west_events) == 4 * 2  # two topics, every round
    assert counts.failure_reasons[("east", "e1:8080", "timeout")] >= 4


def _tick(clock: dict[str, float], stop: threading.Event) -> None:
    while not stop.wait(0.01):
        clock["t"] += 0.05


def test_brokers_are_listed_again_every_round() -> None:
    # The cluster is down at start (listing fails): polled through its admin URL. It comes
    # back with two brokers; a third is added later and polled in the next round.
    listings: list[Callable[[], Sequence[str]]] = [
        _raise(UnavailableError("down")),
        lambda: ["http://b1:8080", "http://b2:8080"],
        lambda: ["http://b1:8080", "http://b2:8080", "http://b3:8080"],
        lambda: ["http://b3:8080"],
    ]
    asked: list[list[str]] = []
    current: list[str] = []

    def lister() -> Sequence[str]:
        return listings.pop(0)()

    def fetch(target: Target) -> Fetched:
        current.append(target.label)
        return answer("east", 1)

    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    collector = Collector(
        targets=[Target("east")],
        fetch=fetch,
        sink=Sink(),
        broker_listers={"east": lister},
        metrics=metrics,
    )
    for _ in range(4):
        collector.poll_once()
        asked.append(sorted(current))
        current.clear()
    assert asked == [
        ["admin"],
        ["b1:8080", "b2:8080"],
        ["b1:8080", "b2:8080", "b3:8080"],
        ["b3:8080"],
    ]
    # Brokers gone from the listing vanish from the per-broker gauge.
    name = "pulsar_balancer_collector_broker_last_read_timestamp_seconds"
    assert registry.get_sample_value(name, {"cluster": "east", "broker": "b3:8080"}) is not None
    assert registry.get_sample_value(name, {"cluster": "east", "broker": "b1:8080"}) is None
    assert registry.get_sample_value(name, {"cluster": "east", "broker": "admin"}) is None


def _raise(exc: Exception) -> Callable[[], Sequence[str]]:
    def fail() -> Sequence[str]:
        raise exc

    return fail


def test_a_failed_listing_keeps_the_brokers_listed_last() -> None:
    listings = iter([["http://b1:8080"], None])
    polled: list[str] = []

    def lister() -> Sequence[str]:
        urls = next(listings)
        if urls is None:
            raise UnavailableError("listing timed out", timed_out=True)
        return urls

    def fetch(target: Target) -> Fetched:
        polled.append(target.label)
        return answer("east", 1)

    collector = Collector(
        targets=[Target("east")], fetch=fetch, sink=Sink(), broker_listers={"east": lister}
    )
    collector.poll_once()
    collector.poll_once()
    assert polled == ["b1:8080", "b1:8080"]
    assert collector.directory.list_failures == {"east": 1}


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (UnauthorizedError("401", status=401), PollFailure.UNAUTHORIZED),
        (ForbiddenError("403", status=403), PollFailure.UNAUTHORIZED),
        (UnavailableError("refused"), PollFailure.UNREACHABLE),
        (UnavailableError("read timeout", timed_out=True), PollFailure.TIMEOUT),
        (InvalidResponseError("not JSON", status=200), PollFailure.INVALID_ANSWER),
        (ValueError("msgRateIn must be a finite number"), PollFailure.INVALID_ANSWER),
        (ServerError("500", status=500), PollFailure.SERVER_ERROR),
        (RuntimeError("anything else"), PollFailure.OTHER),
    ],
    ids=lambda v: v.value if isinstance(v, PollFailure) else type(v).__name__,
)
def test_failures_are_classified(error: Exception, reason: PollFailure) -> None:
    assert classify(error) is reason


def test_every_failed_poll_is_counted_by_cluster_broker_and_reason_and_exported() -> None:
    b1, b2 = Target("west", "http://b1:8080"), Target("west", "http://b2:8080")
    admin = Target("east")
    refuse = {"east": True}

    def fetch(target: Target) -> Fetched:
        if target == admin and refuse["east"]:
            raise UnauthorizedError("401 Unauthorized", status=401)
        if target == b1:
            raise UnavailableError(
                "GET ...: no answer after 4 attempt(s): ReadTimeout", timed_out=True
            )
        if target == b2:
            raise InvalidResponseError("broker-stats: not a JSON object", status=200)
        return answer(target.cluster)

    clock = FakeClock()
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry, clock=lambda: 999.0)
    metrics.register_poll_cluster("east")
    collector = Collector(
        targets=[admin, b1, b2], fetch=fetch, sink=Sink(), metrics=metrics, clock_ms=clock.ms
    )
    collector.poll_once()
    collector.poll_once()

    def failures(cluster: str, broker: str, reason: str) -> float | None:
        return registry.get_sample_value(
            "pulsar_balancer_collector_poll_failures_total",
            {"cluster": cluster, "broker": broker, "reason": reason},
        )

    assert failures("east", "admin", "unauthorized") == 2
    assert failures("west", "b1:8080", "timeout") == 2
    assert failures("west", "b2:8080", "invalid_answer") == 2
    unauthorized = "pulsar_balancer_cluster_unauthorized"
    assert registry.get_sample_value(unauthorized, {"cluster": "east"}) == 1
    # Never read: the last-read gauges hold the process start (999 s here).
    last = "pulsar_balancer_collector_cluster_last_read_timestamp_seconds"
    assert registry.get_sample_value(last, {"cluster": "east"}) == 999.0
    assert registry.get_sample_value(last, {"cluster": "west"}) == 999.0

    refuse["east"] = False  # the token is fixed
    clock.advance(60)
    collector.poll_once()
    assert registry.get_sample_value(unauthorized, {"cluster": "east"}) == 0
    assert registry.get_sample_value(last, {"cluster": "east"}) == clock.ms() / 1000
    broker_last = "pulsar_balancer_collector_broker_last_read_timestamp_seconds"
    assert registry.get_sample_value(broker_last, {"cluster": "east", "broker": "admin"}) == (
        clock.ms() / 1000
    )
    assert collector.counts.unauthorized == {"east": False}


def test_stop_is_not_held_up_by_a_hung_fetch(release: threading.Event) -> None:
    stop = threading.Event()

    def fetch(target: Target) -> Fetched:
        stop.set()  # asked to stop while this fetch hangs
        release.wait()
        return answer(target.cluster)

    collector = Collector(targets=[EAST], fetch=fetch, sink=Sink())
    finished = threading.Event()

    def run() -> None:
        collector.run(interval_s=3600, should_stop=stop.is_set, sleep=stop.wait)
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    # A round would wait an hour for east; stopping ends it within a few checks.
    assert finished.wait(timeout=30)
    assert not release.is_set()
