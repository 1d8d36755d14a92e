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

import pyarrow as pa
import pyarrow.compute as pc

from balancer.app.replay.windows import ClosedWindow, StreamCounts
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.result import PolicyRun, ReplayAction, ReplayResult, WindowSample

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

    Every window repeats nearly all the topics of the last: a window's topics are checked,
    cluster by cluster, against that cluster's topics seen, in Arrow (a hash lookup in
    C++), and only the new ones are added. A topic's name is unique within its cluster, so
    the names are looked up as they are (joining each to its cluster first took a third of
    the time: 13-16 against 7-8 ms of CPU a 100,000-topic window of one cluster; a Python
    set of a tuple per topic ~0.1 s). Memory: one name per distinct topic."""

    def __init__(self) -> None:
        self._seen: dict[str, pa.Array] = {}  # cluster -> its topics seen
        self.clusters: set[str] = set()

    def __len__(self) -> int:
        return sum(len(names) for names in self._seen.values())

    def add(self, rows: pa.Table) -> None:
        """A window's topic rows (`cluster` and `topic` columns)."""
        if rows.num_rows == 0:
            return
        clusters, topics = rows.column("cluster"), rows.column("topic")
        first = clusters[0].as_py()
        if not clusters.null_count and pc.all(pc.equal(clusters, first)).as_py():
            by_cluster = [(first, topics)]  # one cluster: the usual window
        else:
            by_cluster = [
                (cluster, topics.filter(pc.equal(clusters, cluster)))
                for cluster in pc.unique(clusters).to_pylist()
            ]
        for cluster, names in by_cluster:
            self.clusters.add(cluster)
            seen = self._seen.get(cluster, pa.array([], pa.string()))
            new = pc.invert(pc.is_in(names, value_set=seen))
            if pc.any(new).as_py():
                self._seen[cluster] = pa.concat_arrays([seen, pc.unique(names.filter(new))])


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
