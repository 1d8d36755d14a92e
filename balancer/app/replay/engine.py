"""The replay engine: a recording's closed windows through every policy, into a `ReplayResult`.

The windows come from the stream's own code in batch (`balancer.app.replay.windows`), in
event-time order. Each policy keeps its own layout and is handed, per closed window, first
the recorded rounds (load reports, owners) up to the time it handles the window, then the
window itself; it returns the actions it took and the window as its layout carried it.
Policies never see each other's layouts, so one policy's splits and moves change nothing
for another.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from balancer.app.replay.windows import ClosedWindow, StreamCounts
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.result import PolicyRun, ReplayAction, ReplayResult, WindowSample
from streaming.shared.packing import dictionary_codes

log = logging.getLogger(__name__)


class Described(Protocol):
    """What a policy report names a policy by (`ReplayPolicy`s, the core's `Policy`s)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


class ReplayPolicy(Described, Protocol):
    """A policy as the engine drives it."""

    def observe(self, context: RoundContext) -> None:
        """A recorded round (its load reports and owners), before the windows it precedes."""

    def handle_at_ms(self, window_end_ms: int) -> int:
        """When (event time) the policy handles the window ending at `window_end_ms`: the
        rounds recorded up to then are observed first."""
        ...

    def step(self, window: ClosedWindow) -> tuple[list[ReplayAction], WindowSample]:
        """Handle one closed window: the actions taken, and the window as its layout
        carried it."""
        ...

    def close(self) -> None: ...


P = TypeVar("P", bound=Described)


class PolicyWrapper(Generic[P]):
    """A replay policy driving another (`policy`), under that one's name and description."""

    def __init__(self, policy: P) -> None:
        self.policy = policy
        # A policy's name and description are fixed from its start.
        self.name = policy.name
        self.description = policy.description


@dataclass
class _Run:
    policy: ReplayPolicy
    actions: list[ReplayAction] = field(default_factory=list)
    windows: list[WindowSample] = field(default_factory=list)


class _Contexts:
    """The recorded rounds, handed out in time order up to a time."""

    def __init__(self, contexts: Iterable[RoundContext]) -> None:
        self._it: Iterator[RoundContext] = iter(contexts)
        self._next: RoundContext | None = next(self._it, None)
        self.clusters: set[str] = set()
        self.rounds = 0

    def until(self, at_ms: int) -> list[RoundContext]:
        out = []
        while self._next is not None and self._next.round_ms <= at_ms:
            out.append(self._next)
            self.clusters.add(self._next.cluster)
            self._next = next(self._it, None)
        self.rounds += len(out)
        return out


class DistinctTopics:
    """The distinct (cluster, topic) pairs seen over a replay, and their clusters.

    Every window repeats nearly all the topics of the last, so a window is checked against
    the topics seen on integers: a topic's key is its (cluster, namespace)'s number and its
    hash position (both follow from the pair), looked up in the sorted keys seen
    (`searchsorted`), and a found key's first topic compared with the row's by name, in
    Arrow. A topic whose key another topic took first (two names of one namespace at one
    position) is kept by name in a set. ~0.01 s a window of 100,000 topics, where joining
    the pairs to strings and `is_in` them took ~0.04 s and a Python set of tuples ~0.1 s
    (issue 44). Memory: a key and a name per distinct topic, as the set held."""

    def __init__(self) -> None:
        self._namespaces: dict[tuple[str, str], int] = {}  # (cluster, namespace) -> number
        self._keys = np.zeros(0, dtype=np.int64)  # sorted: number << 32 | position
        self._names = pa.array([], pa.string())  # the first topic of each key
        self._others: set[tuple[str, str]] = set()  # (cluster, topic): key taken by another
        self.clusters: set[str] = set()

    def __len__(self) -> int:
        return len(self._keys) + len(self._others)

    def add(self, rows: pa.Table) -> None:
        """A window's topic rows: `cluster`, `namespace`, `topic` and `position` columns."""
        if rows.num_rows == 0:
            return
        keys = self._keys_of(rows)
        topics = rows.column("topic").combine_chunks()
        at = np.minimum(np.searchsorted(self._keys, keys), max(0, len(self._keys) - 1))
        found = self._keys[at] == keys if len(self._keys) else np.zeros(len(keys), dtype=bool)
        same = np.zeros(len(keys), dtype=bool)
        if found.any():
            rows_found = np.flatnonzero(found)
            equal = pc.equal(topics.take(rows_found), self._names.take(at[rows_found]))
            same[rows_found] = equal.to_numpy(zero_copy_only=False)
        new = np.flatnonzero(~found)
        if len(new):
            new_keys, first = np.unique(keys[new], return_index=True)
            # Within the window, a new key's first row names its topic.
            names = topics.take(new[first])
            all_keys = np.concatenate([self._keys, new_keys])
            order = np.argsort(all_keys, kind="stable")
            self._keys = all_keys[order]
            self._names = pa.concat_arrays([self._names, names]).take(order)
            at = np.searchsorted(self._keys, keys[new])
            same[new] = pc.equal(topics.take(new), self._names.take(at)).to_numpy(
                zero_copy_only=False
            )
        if not same.all():  # another topic holds the key: by name
            other = np.flatnonzero(~same)
            clusters = rows.column("cluster").take(other).to_pylist()
            self._others.update(zip(clusters, topics.take(other).to_pylist(), strict=True))

    def _keys_of(self, rows: pa.Table) -> np.ndarray:
        cluster_codes, clusters_seen = dictionary_codes(rows.column("cluster"))
        namespace_codes, namespaces_seen = dictionary_codes(rows.column("namespace"))
        clusters, namespaces = clusters_seen.to_pylist(), namespaces_seen.to_pylist()
        self.clusters.update(clusters)
        pairs = cluster_codes * len(namespaces) + namespace_codes
        numbers = np.zeros(len(clusters) * len(namespaces), dtype=np.int64)
        for pair in np.unique(pairs).tolist():
            key = (clusters[pair // len(namespaces)], namespaces[pair % len(namespaces)])
            numbers[pair] = self._namespaces.setdefault(key, len(self._namespaces))
        positions = rows.column("position").to_numpy()
        if len(positions) and (positions.min() < 0 or positions.max() >= 1 << 32):
            raise ValueError("a topic's hash position is outside [0, 2**32)")
        keys: np.ndarray = (numbers[pairs] << 32) | positions
        return keys


def _gaps(empty_ends: Sequence[int], window_ms: int) -> tuple[tuple[int, int], ...]:
    """Runs of windows no topic reported in, as (first end, last end)."""
    runs: list[tuple[int, int]] = []
    for end in empty_ends:
        if runs and end - runs[-1][1] <= window_ms:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((end, end))
    return tuple(runs)


def run_replay(
    *,
    source: str,
    windows: Iterable[ClosedWindow],
    contexts: Iterable[RoundContext],
    policies: Sequence[ReplayPolicy],
    counts: StreamCounts,
    window_s: int,
) -> ReplayResult:
    """Drive every policy over every closed window; the result of the whole replay.

    `counts` is filled by the windows' stream as it runs (read once the windows are done)."""
    runs = [_Run(p) for p in policies]
    rounds = _Contexts(contexts)
    topics = DistinctTopics()
    empty: list[int] = []
    first_ms = last_ms = 0
    for window in windows:
        first_ms = first_ms or window.end_ms
        last_ms = window.end_ms
        handle_ms = max(p.handle_at_ms(window.end_ms) for p in policies) if policies else 0
        for context in rounds.until(handle_ms):
            for run in runs:
                run.policy.observe(context)
        if window.topics:
            topics.add(window.topic_table())
        else:
            empty.append(window.end_ms)
        for run in runs:
            actions, sample = run.policy.step(window)
            run.actions.extend(actions)
            run.windows.append(sample)
    for run in runs:
        run.policy.close()
    return ReplayResult(
        source=source,
        start_ms=first_ms,
        end_ms=last_ms,
        window_s=window_s,
        clusters=tuple(sorted(topics.clusters | rounds.clusters)),
        topics=len(topics),
        samples=counts.samples,
        samples_rejected=dict(counts.rejected),
        samples_late=counts.late,
        runs=tuple(
            PolicyRun(
                policy=run.policy.name,
                description=run.policy.description,
                actions=tuple(run.actions),
                windows=tuple(run.windows),
            )
            for run in runs
        ),
        gaps_ms=_gaps(empty, window_s * 1000),
    )
