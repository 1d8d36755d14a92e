"""What the window stage does when a window of one PIP-157 bucket closes (pure, Arrow).

The stage's state is kept per bucket (`streaming.stage.windows.WindowPacks`): the packs of the
bucket's open windows and the bucket's *known topics*, every topic that closed a window
within the last `known_ttl_ms` of event time with the end of its newest window. When a
window closes:

1. its packs are aggregated into one row per topic (`streaming.shared.packing.aggregate_window`);
2. its topics join the known topics (a topic keeps its newest window end), and topics whose
   newest window ended `known_ttl_ms` or more before this window's end leave;
3. the stage emits one `ClosedWindow` row: the per-topic rows and the known topics (cluster,
   namespace, position), both as Arrow payloads, with the window's namespaces. When its reader
   reads only a batch's newest window (`NEWEST_WINDOW_ONLY_PROPERTY`), a close that a later
   close of the same bucket and batch supersedes is a head only (`BucketCloses`).

Everything after that runs on the executors (`streaming.stage.partials`, then the driver's
merge in `streaming.driver.rollup`): the driver sees bundles.
A bucket with known topics but no packs in a window still closes it (the stage keeps a timer
one slide ahead), so its known topics count toward the completeness of every window.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming.shared.packing import TRANSIENT_CODEC, decode, encode
from streaming.shared.schema import CLOSED_ARROW_SCHEMA
from streaming.shared.topic_keys import KEY_COLUMN, KEY_FIELD, topics_in

# The bundle partials of a close (an Arrow payload) from its per-topic rows, its known
# topics' positions and its bucket: `streaming.stage.partials.close_partials` with the layouts the
# stage was given.
PartialsOf = Callable[[pa.Table, pa.Table, int], bytes]

# A bucket's known topics, as kept in the stage's state. Not their names: a topic's key and
# position identify it (streaming.shared.topic_keys), and the roll-up needs its cluster, namespace
# and position only (names took ~16 % of the known topics' bytes, read and written at each
# close). Known topics stored with names, by earlier versions, lose them when read
# (`streaming.shared.packing.decode`).
KNOWN_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("namespace", pa.string()),
        ("position", pa.int64()),
        ("end_ms", pa.int64()),  # end of the topic's newest closed window
        KEY_FIELD,
    ]
)
# What the roll-up needs of them.
KNOWN_POSITIONS_SCHEMA: Final = pa.schema(
    [("cluster", pa.string()), ("namespace", pa.string()), ("position", pa.int64())]
)
# A topic that has not reported for a few windows still belongs to its bundle: it is known
# for this many window lengths of event time after its newest window's end.
KNOWN_TTL_WINDOWS: Final = 3
# Known topics are stored in chunks of this many rows: no state value grows without bound.
KNOWN_CHUNK_ROWS: Final = 200_000
# A close leaves the stage in parts of at most this many topics (and known topics).
CLOSE_PART_ROWS: Final = 200_000
# A Spark local property of the job that runs a batch: "true" when its reader reads only the
# batch's newest window with topics (`streaming.driver.batch.BatchProcessor`), so the stage
# leaves the payloads of the closes a later close supersedes out (`BucketCloses`). A task sees
# its job's properties; without it every close carries its rows.
NEWEST_WINDOW_ONLY_PROPERTY: Final = "pulsar_balancer.newest_window_only"


def remember(known: pa.Table, window: pa.Table, *, end_ms: int, ttl_ms: int) -> pa.Table:
    """Known topics after the window ending at `end_ms` closed with the rows `window`.

    The window's topics join with `end_ms` as their newest window end (windows of a bucket
    close oldest first, so no known topic has a later one); then every topic whose newest
    window ended at or before `end_ms - ttl_ms` leaves.
    """
    new = pa.table(
        {
            "cluster": window.column("cluster"),
            "namespace": window.column("namespace"),
            "position": window.column("position").cast(pa.int64()),
            "end_ms": pa.array(np.full(window.num_rows, end_ms, dtype=np.int64)),
            KEY_COLUMN: window.column(KEY_COLUMN),
        },
        schema=KNOWN_SCHEMA,
    )
    old = known.cast(KNOWN_SCHEMA)
    old = old.filter(pc.greater(old.column("end_ms"), end_ms - ttl_ms))
    if old.num_rows and new.num_rows:
        # A topic's name holds its namespace: (cluster, topic), i.e. its key and position,
        # identifies it.
        old_keys, old_positions, new_keys, new_positions = (
            t.column(name).to_numpy() for t in (old, new) for name in (KEY_COLUMN, "position")
        )
        old = old.filter(pa.array(~topics_in(old_keys, old_positions, new_keys, new_positions)))
    return pa.concat_tables([old, new]) if new.num_rows else old


def known_chunks(known: pa.Table) -> list[bytes]:
    """The known topics as payloads of at most `KNOWN_CHUNK_ROWS` rows each."""
    return [
        encode(known.slice(start, KNOWN_CHUNK_ROWS))
        for start in range(0, known.num_rows, KNOWN_CHUNK_ROWS)
    ]


def known_of(chunks: Sequence[bytes]) -> pa.Table:
    return decode(chunks, KNOWN_SCHEMA)


@dataclass(frozen=True, slots=True)
class ClosedWindow:
    """One output row of the window stage: a part of a window of one bucket that closed.

    A close is cut into parts of at most `CLOSE_PART_ROWS` topics and as many known topics,
    so no row grows with the topic count (a 10M-topic bucket would be one value of
    hundreds of MB for the JVM to hold); each topic is in exactly one part.
    """

    window_start_ms: int
    window_end_ms: int
    bucket: int
    part: int
    topics: int  # topics of this part that reported in the window (0: known topics only)
    # None on a superseded close's head (`BucketCloses`: one row, part 0, all its topics).
    namespaces: str | None  # JSON list of [cluster, namespace] pairs that reported, sorted
    payload: bytes | None  # this part's per-topic rows (WINDOW_SCHEMA)
    known: bytes | None  # this part's known topics of the bucket (KNOWN_POSITIONS_SCHEMA)
    # Part 0 only, when the stage was given layouts: the whole close's bundle partials
    # (streaming.stage.partials.close_partials, an Arrow payload of PARTIAL_SCHEMA rows); not on a
    # close with topics that a later close of the batch supersedes (`BucketCloses`).
    partials: bytes | None = None

    def to_row(self) -> dict[str, object]:
        """The stage's output row: the fields are `CLOSED_COLUMNS`, in order (`_ms`: the
        columns' unit)."""
        values = (getattr(self, f.name) for f in fields(self))
        return dict(zip(CLOSED_ARROW_SCHEMA.names, values, strict=True))


def _namespaces(window: pa.Table) -> str:
    # Without Arrow's thread pool: on a worker busy with other tasks, handing a close's few
    # thousand rows to the pool's threads and waiting for them cost ~10x the grouping itself
    # (py-spy: ~4 ms a close against ~0.1 ms offline;
    # docs/decisions.md#namespaces-grouped-without-the-arrow-thread-pool).
    pairs = (
        window.select(["cluster", "namespace"])
        .group_by(["cluster", "namespace"], use_threads=False)
        .aggregate([])
    )
    return json.dumps(
        sorted(zip(pairs.column(0).to_pylist(), pairs.column(1).to_pylist(), strict=True))
    )


def close_parts(
    window: pa.Table, after: pa.Table, *, bucket: int, start_ms: int, end_ms: int, part_rows: int
) -> list[ClosedWindow]:
    """The stage's output rows for a closed window: `window`'s per-topic rows and the
    bucket's known topics `after` it (`remember`), in parts of at most `part_rows` of each.
    Which closes carry bundle partials, or only a head, `BucketCloses` decides."""
    positions = _positions(after)
    parts = max(1, -(-window.num_rows // part_rows), -(-positions.num_rows // part_rows))
    closed = []
    for part in range(parts):
        rows = window.slice(part * part_rows, part_rows)
        closed.append(
            ClosedWindow(
                window_start_ms=start_ms,
                window_end_ms=end_ms,
                bucket=bucket,
                part=part,
                topics=rows.num_rows,
                namespaces=_namespaces(rows),
                payload=encode(rows.drop_columns([KEY_COLUMN]), codec=TRANSIENT_CODEC),
                known=encode(positions.slice(part * part_rows, part_rows), codec=TRANSIENT_CODEC),
            )
        )
    return closed


class _Held(NamedTuple):
    """The newest close with topics of a bucket's batch, while something of it waits."""

    first_row: int  # its part 0 in `BucketCloses.rows`
    start_ms: int
    end_ms: int
    window: pa.Table  # its per-topic rows
    after: pa.Table  # the bucket's known topics after it
    encoded: bool  # its rows are out (else a head stands in their place)


class BucketCloses:
    """A bucket's closes in one batch, oldest first, with the bundle partials on the closes
    the driver may read them from.

    The driver rolls up only the batch's newest window that some topic reported in
    (`streaming.driver.batch`), which is at least this bucket's newest close with topics. So a close
    with topics leaves its partials out when a later close of the batch has topics too: in a
    backlog a bucket closes many windows a batch (25 in `bench.pipeline`'s default run, where
    rolling each of them up took ~17 % of the workers' time). A fill-in (no topics) gets its
    partials when it closes: it may be the batch's newest window, and holding its known
    topics until the end would take memory a large bucket cannot spare. So at most one close
    waits for `finish`.

    With `newest_only` (the reader reads nothing but the batch's newest window with topics,
    `NEWEST_WINDOW_ONLY_PROPERTY`), such a superseded close leaves its rows out too: it is
    one head (window, bucket, part 0, its topic count; no namespaces, payload or known
    topics), and the newest close with topics is encoded at `finish`. Encoding the rows of
    every close cost ~7 % of the workers' time in that default run (py-spy).
    """

    def __init__(
        self,
        *,
        bucket: int,
        ttl_ms: int,
        part_rows: int,
        partials_of: PartialsOf | None,
        newest_only: bool = False,
    ) -> None:
        self.bucket = bucket
        self.ttl_ms = ttl_ms
        self.part_rows = part_rows
        self.partials_of = partials_of
        self.newest_only = newest_only
        self.rows: list[ClosedWindow] = []
        # Held only while its rows or its partials are still to make.
        self._newest: _Held | None = None

    def close(self, window: pa.Table, known: pa.Table, *, start_ms: int, end_ms: int) -> pa.Table:
        """Closes the window `window` holds the per-topic rows of; gives the known topics
        after it."""
        after = remember(known, window, end_ms=end_ms, ttl_ms=self.ttl_ms)
        index = len(self.rows)
        if window.num_rows and self.newest_only:
            head = ClosedWindow(
                window_start_ms=start_ms, window_end_ms=end_ms, bucket=self.bucket, part=0,
                topics=window.num_rows, namespaces=None, payload=None, known=None,
            )  # fmt: skip
            self.rows.append(head)  # the rows take its place at `finish`, if still the newest
            self._newest = _Held(index, start_ms, end_ms, window, after, encoded=False)
            return after
        self.rows.extend(self._parts(window, after, start_ms=start_ms, end_ms=end_ms))
        if not window.num_rows:  # a fill-in
            self._roll_up(index, window, after)
        elif self.partials_of is not None:
            self._newest = _Held(index, start_ms, end_ms, window, after, encoded=True)
        return after

    def finish(self) -> list[ClosedWindow]:
        """The rows of every close, the newest close with topics carrying its partials."""
        held, self._newest = self._newest, None
        if held is not None:
            if not held.encoded:
                self.rows[held.first_row : held.first_row + 1] = self._parts(
                    held.window, held.after, start_ms=held.start_ms, end_ms=held.end_ms
                )
            self._roll_up(held.first_row, held.window, held.after)
        return self.rows

    def _parts(
        self, window: pa.Table, after: pa.Table, *, start_ms: int, end_ms: int
    ) -> list[ClosedWindow]:
        return close_parts(
            window, after, bucket=self.bucket, start_ms=start_ms, end_ms=end_ms,
            part_rows=self.part_rows,
        )  # fmt: skip

    def _roll_up(self, first: int, window: pa.Table, after: pa.Table) -> None:
        """Puts the partials of the close whose part 0 is row `first` on that row."""
        if self.partials_of is not None:
            partials = self.partials_of(window, _positions(after), self.bucket)
            self.rows[first] = replace(self.rows[first], partials=partials)


def _positions(known: pa.Table) -> pa.Table:
    return known.select(list(KNOWN_POSITIONS_SCHEMA.names))


def closed_table(rows: Iterable[ClosedWindow]) -> pa.Table:
    """The stage's output rows as an Arrow table (what foreachBatch sees, column for column)."""
    return pa.Table.from_pylist([r.to_row() for r in rows], schema=CLOSED_ARROW_SCHEMA)


__all__ = [
    "CLOSE_PART_ROWS",
    "KNOWN_POSITIONS_SCHEMA",
    "KNOWN_SCHEMA",
    "KNOWN_TTL_WINDOWS",
    "NEWEST_WINDOW_ONLY_PROPERTY",
    "BucketCloses",
    "ClosedWindow",
    "PartialsOf",
    "close_parts",
    "closed_table",
    "known_chunks",
    "known_of",
    "remember",
]
