"""Window arithmetic of the stream (pure): which windows hold an event, and which are late."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.stage.windows import (
    WindowConfigError,
    WindowSpec,
    first_window_end_ms,
    late_events,
    window_starts_ms,
)

SPEC = WindowSpec(window_s=300, slide_s=60, watermark_s=120)


@given(
    t=st.integers(min_value=0, max_value=2**42),
    slide_s=st.integers(min_value=1, max_value=600),
    k=st.integers(min_value=1, max_value=10),
)
def test_an_event_lies_in_exactly_window_over_slide_windows(t: int, slide_s: int, k: int) -> None:
    spec = WindowSpec(window_s=slide_s * k, slide_s=slide_s, watermark_s=0)
    starts = window_starts_ms(t, spec)
    assert len(starts) == k
    assert all(s % spec.slide_ms == 0 and s <= t < s + spec.window_ms for s in starts)
    assert starts == sorted(starts)
    # no other slide-aligned window holds it
    assert not (starts[0] - spec.slide_ms <= t < starts[0] - spec.slide_ms + spec.window_ms)
    assert first_window_end_ms(t, spec) == starts[0] + spec.window_ms


@pytest.mark.parametrize(
    ("event_ms", "watermark_ms", "late"),
    [
        (60_000, 0, 0),  # no watermark yet: nothing is late
        (60_000, 120_000, 1),  # first window [-180 s, 120 s) ended at the watermark
        (60_000, 119_999, 0),
        (119_999, 120_000, 1),
        (120_000, 120_000, 0),  # its first window ends at 180 s
    ],
    ids=["no-watermark", "at-watermark", "just-before", "last-ms-of-slide", "next-slide"],
)
def test_late_means_the_first_window_had_closed(
    event_ms: int, watermark_ms: int, late: int
) -> None:
    assert late_events({event_ms: 1}, watermark_ms, SPEC) == late


def test_late_events_counts_every_event_at_a_time() -> None:
    assert late_events({0: 3, 10**9: 2}, 500_000, SPEC) == 3


@given(
    times_ms=st.lists(st.integers(min_value=0, max_value=2**42), max_size=30),
    watermark_ms=st.integers(min_value=0, max_value=2**42),
)
def test_events_counted_by_pane_are_late_as_by_time(times_ms: list[int], watermark_ms: int) -> None:
    # The read tasks summarise event times by pane (the slide they fall in): same verdict.
    by_time = Counter(times_ms)
    by_pane = Counter(t - t % SPEC.slide_ms for t in times_ms)
    assert late_events(by_pane, watermark_ms, SPEC) == late_events(by_time, watermark_ms, SPEC)


@pytest.mark.parametrize(
    ("window_s", "slide_s", "watermark_s"),
    [(0, 60, 0), (300, 0, 0), (300, 60, -1), (300, 70, 0)],
    ids=["zero-window", "zero-slide", "negative-watermark", "not-a-multiple"],
)
def test_bad_window_settings_are_refused(window_s: int, slide_s: int, watermark_s: int) -> None:
    with pytest.raises(WindowConfigError):
        WindowSpec(window_s, slide_s, watermark_s)
