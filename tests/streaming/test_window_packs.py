"""The window stage's processor (`WindowPacks`) in-process, against an in-memory state handle.

Spark drives a `StatefulProcessor` per task: `handleInputRows` for each key with new rows,
then `handleExpiredTimer` for each timer at or before the watermark (oldest first, deleting
each after its call), then `close`. `FakeHandle` keeps the state the processor asks for in
memory and counts what it writes, so these tests can see which packs went to the state store:
the real-Spark tests (test_window_stage.py) see only the stage's output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from streaming.closing import KNOWN_TTL_WINDOWS
from streaming.packing import decode_windows, pack_events
from streaming.rollup import decode_known
from streaming.windows import WindowPacks, WindowSpec
from tests.streaming.test_packing import event, table

SPEC = WindowSpec(window_s=120, slide_s=60, watermark_s=60)
MINUTE = SPEC.slide_ms
BASE_MS = 1_700_000_040_000  # a multiple of the slide
ROUTE = (0,)  # the key: bucket 0's route


class FakeListState:
    def __init__(self) -> None:
        self.values: list[tuple[Any, ...]] = []
        self.appended = 0  # values written by appendList

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter(list(self.values))

    def appendList(self, values: list[tuple[Any, ...]]) -> None:
        self.values.extend(values)
        self.appended += len(values)

    def put(self, values: list[tuple[Any, ...]]) -> None:
        self.values = list(values)

    def clear(self) -> None:
        self.values = []


class FakeValueState:
    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> tuple[Any, ...] | None:
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value


class FakeHandle:
    def __init__(self) -> None:
        self.lists: dict[str, FakeListState] = {}
        self.values: dict[str, FakeValueState] = {}
        self.timers: set[int] = set()

    def getListState(self, name: str, schema: Any) -> FakeListState:
        return self.lists.setdefault(name, FakeListState())

    def getValueState(self, name: str, schema: Any) -> FakeValueState:
        return self.values.setdefault(name, FakeValueState())

    def registerTimer(self, expiry_ms: int) -> None:
        self.timers.add(expiry_ms)

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self.timers))

    def packs_stored(self) -> int:
        return sum(s.appended for name, s in self.lists.items() if name.startswith("packs_"))


def rows_of(minutes: range, topics: int) -> pd.DataFrame:
    """The stage's input rows for `minutes` of stats: each pack once per window holding its
    pane, its payload on the row of its last window (as `topic_windows` explodes it)."""
    events = [
        event(f"t{k}", BASE_MS + m * MINUTE + k, rate=float(m * 10 + k), size=m)
        for m in minutes
        for k in range(topics)
    ]
    packs = pack_events(table(events), np.zeros(len(events), dtype=np.int64), slide_ms=MINUTE)
    rows = []
    for pack in packs:
        for back in range(SPEC.window_ms // MINUTE - 1, -1, -1):
            start = pack.pane_start_ms - back * MINUTE
            payload = pack.payload if start == pack.pane_start_ms else None
            rows.append((ROUTE[0], pack.pane_start_ms, pack.events, start, payload))
    return pd.DataFrame(rows, columns=["route", "pane_start", "events", "window_start", "payload"])


def run_batch(
    processor: WindowPacks, handle: FakeHandle, rows: pd.DataFrame | None, watermark_ms: int
) -> list[dict[str, Any]]:
    """One micro-batch as Spark runs it for one key; the closed rows it emitted."""
    values = TimerValues(0, watermark_ms)
    out: list[pd.DataFrame] = []
    if rows is not None:
        out += processor.handleInputRows(ROUTE, iter([rows]), values)
    while due := [t for t in sorted(handle.timers) if t <= watermark_ms]:
        out += processor.handleExpiredTimer(ROUTE, values, ExpiredTimerInfo(due[0]))
        handle.timers.discard(due[0])
    processor.close()
    return [row for frame in out for row in frame.to_dict("records")]


def closes(rows: list[dict[str, Any]]) -> dict[int, tuple[list[dict[str, Any]], list[Any]]]:
    """Window end -> (its per-topic rows, its known topics' positions)."""
    return {
        row["window_end"]: (
            decode_windows([row["payload"]]).to_pylist(),
            decode_known([row["known"]]).column("position").to_pylist(),
        )
        for row in rows
    }


def processor() -> tuple[WindowPacks, FakeHandle]:
    packs = WindowPacks(SPEC, known_ttl_ms=KNOWN_TTL_WINDOWS * SPEC.window_ms, num_buckets=1)
    handle = FakeHandle()
    packs.init(handle)  # type: ignore[arg-type]  # the handle's API, kept in memory
    return packs, handle


MINUTES = 6
# Past every window holding the data: the last pane's last window ends at minute 7.
END_MS = BASE_MS + (MINUTES + 1) * MINUTE - 1


def minute_by_minute() -> tuple[list[dict[str, Any]], FakeHandle]:
    """A live stream: each batch brings a minute and closes the window that minute ends."""
    packs, handle = processor()
    out = []
    for m in range(MINUTES):
        out += run_batch(packs, handle, rows_of(range(m, m + 1), 3), BASE_MS + m * MINUTE - 1)
    out += run_batch(packs, handle, None, END_MS)
    return out, handle


def test_a_backlog_closes_its_packs_without_storing_them_with_the_same_windows() -> None:
    live, live_handle = minute_by_minute()
    assert live_handle.packs_stored() == MINUTES  # each pack waited for its next batch
    packs, handle = processor()
    backlog = run_batch(packs, handle, rows_of(range(MINUTES), 3), END_MS)
    assert handle.packs_stored() == 0  # every window of every pane closed in the batch
    assert closes(backlog) == closes(live)
    assert len(closes(live)) == MINUTES + 1  # every window holding a minute of the data
    assert not any(s.values for s in handle.lists.values() if s is not handle.lists["known"])


def test_packs_held_for_a_close_that_returns_at_once_are_stored_for_the_next() -> None:
    # A timer of a window the bucket closed before fires first (its call returns at once):
    # the packs held go to the state, and the call that closes their windows reads them.
    live, _ = minute_by_minute()
    packs, handle = processor()
    first = run_batch(packs, handle, rows_of(range(3), 3), BASE_MS + 3 * MINUTE - 1)
    closed_through = max(row["window_end"] for row in first)
    handle.registerTimer(closed_through - 1)  # already closed
    rest = run_batch(packs, handle, rows_of(range(3, MINUTES), 3), END_MS)
    assert handle.packs_stored() > 0
    assert closes(first + rest) == closes(live)


def test_packs_held_for_closes_that_never_ran_fail_the_task() -> None:
    packs, _ = processor()
    values = TimerValues(0, END_MS)
    list(packs.handleInputRows(ROUTE, iter([rows_of(range(2), 1)]), values))
    with pytest.raises(RuntimeError, match="packs held for closes that did not run"):
        packs.close()  # no timer ran: the task fails (Spark retries it) instead of losing them
