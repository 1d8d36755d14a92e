"""With round markers, the collector starts its rounds on the interval's grid and ends each
with a marker promising that no event older than the next round will come (issue 36)."""

from __future__ import annotations

from balancer.collector.ports import Fetch, Fetched
from balancer.collector.rounds import next_round_ms
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from balancer.core.events import TopicStatsEvent, parse_message
from balancer.core.round_marker import MARKER_KEY, is_round_marker, parse_round_marker
from tests.collector.test_collector_envelopes import Sample, Sink, topics

START_MS = 1_800_000_037_000  # 37 s past a minute: off the grid


class Clocks:
    """Simulated time: a sleep moves the monotonic clock by what was asked and the wall
    clock by `wall_lag_s` less (a sleep timed on one clock can wake early on the other)."""

    def __init__(self, wall_lag_s: float = 0.0) -> None:
        self.wall_s = START_MS / 1000
        self.mono_s = 0.0
        self.wall_lag_s = wall_lag_s

    def clock_ms(self) -> int:
        return round(self.wall_s * 1000)

    def monotonic(self) -> float:
        return self.mono_s

    def sleep(self, seconds: float) -> None:
        self.mono_s += seconds
        early = self.wall_lag_s if seconds > 1 else 0.0  # long sleeps only
        self.wall_s += seconds - early


def _messages(sink: Sink) -> list[TopicStatsEvent | int]:
    """What was sent, in order: events, and each marker's until_ms."""
    out: list[TopicStatsEvent | int] = []
    for key, value, _ in sink.sent:
        if is_round_marker(value):
            assert key == MARKER_KEY
            until = parse_round_marker(value)
            assert isinstance(until, int)
            out.append(until)
            continue
        for event in parse_message(value):
            assert isinstance(event, TopicStatsEvent)
            out.append(event)
    return out


def _collector(fetch: Fetch, sink: Sink, clocks: Clocks, *, markers: bool = True) -> Collector:
    return Collector(
        targets=[Target("east", "http://b1:8080"), Target("east", "http://b2:8080")],
        fetch=fetch,
        sink=sink,
        clock_ms=clocks.clock_ms,
        monotonic=clocks.monotonic,
        round_markers=markers,
    )


def _fetch(clocks: Clocks) -> Fetch:
    def fetch(target: Target) -> Fetched:
        return Fetched(samples=[(t, Sample(1.0)) for t in topics("acme/orders", 3)])

    return fetch


def test_rounds_start_on_the_grid_and_each_ends_with_its_marker() -> None:
    clocks, sink = Clocks(), Sink()
    counts = _collector(_fetch(clocks), sink, clocks).run(
        interval_s=60, sleep=clocks.sleep, max_polls=3
    )
    sent = _messages(sink)
    markers = [m for m in sent if isinstance(m, int)]
    first_grid = next_round_ms(START_MS, 60)
    assert first_grid == 1_800_000_060_000
    assert markers == [first_grid, first_grid + 60_000, first_grid + 120_000]
    assert counts.markers == 3
    # Every event lies before the marker that follows it and from the one before it on.
    floor_ms = START_MS
    for item in sent:
        if isinstance(item, int):
            floor_ms = item
            continue
        assert item.timestamp_ms >= floor_ms
        assert item.timestamp_ms < next(m for m in markers if m > floor_ms)
    # Rounds 2 and 3 start on the grid: each 60 s window holds exactly one round.
    stamps = sorted({e.timestamp_ms for e in sent if isinstance(e, TopicStatsEvent)})
    assert stamps == [START_MS, first_grid, first_grid + 60_000]


def test_a_round_waits_for_the_wall_clock_to_reach_its_marker() -> None:
    # The sleep wakes 5 ms early on the wall clock: the round must still not start before
    # the time its predecessor's marker promised.
    clocks, sink = Clocks(wall_lag_s=0.005), Sink()
    _collector(_fetch(clocks), sink, clocks).run(interval_s=60, sleep=clocks.sleep, max_polls=2)
    sent = _messages(sink)
    first_marker = next(m for m in sent if isinstance(m, int))
    after = sent[sent.index(first_marker) + 1 :]
    events = [e for e in after if isinstance(e, TopicStatsEvent)]
    assert events
    assert min(e.timestamp_ms for e in events) >= first_marker


def test_the_marker_follows_the_retried_answers_of_its_round() -> None:
    clocks, sink = Clocks(), Sink()
    calls: dict[str, int] = {}

    def fetch(target: Target) -> Fetched:
        calls[target.label] = calls.get(target.label, 0) + 1
        if target.label == "b2:8080" and calls[target.label] == 1:
            raise ConnectionError("refused")
        return Fetched(samples=[(t, Sample(1.0)) for t in topics(f"acme/{target.label}", 2)])

    _collector(fetch, sink, clocks).run(interval_s=60, retry_s=10, sleep=clocks.sleep, max_polls=1)
    sent = _messages(sink)
    assert isinstance(sent[-1], int)  # the marker comes last: after the retry's events
    assert sum(1 for e in sent if isinstance(e, TopicStatsEvent) and "b2" in e.topic) == 2


def test_without_round_markers_nothing_but_events_is_sent() -> None:
    clocks, sink = Clocks(), Sink()
    counts = _collector(_fetch(clocks), sink, clocks, markers=False).run(
        interval_s=60, sleep=clocks.sleep, max_polls=2
    )
    assert all(isinstance(m, TopicStatsEvent) for m in _messages(sink))
    assert counts.markers == 0
