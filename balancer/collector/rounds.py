"""One poll round: every cluster on its own, every broker on its own, none waited for too long.

A slow or blackholed broker costs the admin client's attempts x its timeout (minutes at the
shipped settings). Polled one after another, one such broker delayed every other cluster's
polls by that much each round. Here each cluster's round runs on its own thread (listing
its brokers, then fetching them), each fetch on its own thread (at most
`max_parallel_per_cluster` of one cluster at once: every answer is held in memory until
sent), and the round ends at its deadline whatever is still running: what did not answer
by then counts as a timeout, and a broker still being fetched from an earlier round is not
asked again until that fetch ends. Threads are daemons, so a hung fetch never holds up the
process's exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from balancer.collector.targets import Target

_T = TypeVar("_T")
STOP_CHECK_S = 0.25  # how often a waiting round looks whether the process stops
# Brokers of one cluster fetched at once: each answer is held until sent, ~5.7 KiB a topic
# (bench.collector_memory: 1.1 GiB for a 200,000-topic answer), so this bounds memory.
DEFAULT_MAX_PARALLEL_PER_CLUSTER = 4


class RoundTimeout(TimeoutError):
    """No answer by the round's deadline (or the broker is still busy with an earlier one)."""


@dataclass(frozen=True, slots=True)
class FetchResult(Generic[_T]):
    """One target's outcome in a round: its answer, or the error that stopped it."""

    target: Target
    poll_ms: int  # when the fetch started: the events' time
    answer: _T | None = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class _Listed:
    cluster: str
    targets: tuple[Target, ...]


def fixed_targets(targets: Sequence[Target]) -> Callable[[], Sequence[Target]]:
    """A cluster's targets for `RoundRunner.run`, as given (not listed again)."""
    fixed = tuple(targets)
    return lambda: fixed


def round_wait_s(interval_s: float, round_deadline_s: float | None = None) -> float:
    """How long a round waits for answers: its deadline, at most the polling interval (the
    next round is due then). `run`, `collect` and `plan` all use it."""
    return min(round_deadline_s or interval_s, interval_s)


def next_round_ms(now_ms: int, interval_s: float) -> int:
    """The start of the next round on the interval's grid of the wall clock (epoch ms)."""
    interval_ms = max(1, round(interval_s * 1000))
    return (now_ms // interval_ms + 1) * interval_ms


class RoundRunner(Generic[_T]):
    """Runs fetches concurrently per cluster and per broker, each round to a deadline."""

    def __init__(
        self,
        fetch: Callable[[Target], _T],
        *,
        clock_ms: Callable[[], int],
        monotonic: Callable[[], float],
        max_parallel_per_cluster: int = DEFAULT_MAX_PARALLEL_PER_CLUSTER,
    ) -> None:
        if max_parallel_per_cluster < 1:
            raise ValueError("max_parallel_per_cluster must be >= 1")
        self._fetch = fetch
        self._clock_ms = clock_ms
        self._monotonic = monotonic
        self._max_parallel = max_parallel_per_cluster
        self._lock = threading.Lock()
        self._busy: set[Target] = set()  # fetches running, maybe from an earlier round
        self._listing: set[str] = set()  # clusters whose broker listing is still running

    def busy(self) -> frozenset[Target]:
        with self._lock:
            return frozenset(self._busy)

    def run(
        self,
        targets_of: Mapping[str, Callable[[], Sequence[Target]]],
        *,
        deadline: float,
        refresh: Callable[[str], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[FetchResult[_T]]:
        """Yield each target's result as it comes, then a timeout for every one left.

        `targets_of` gives each cluster's targets (asked on the cluster's own thread, after
        `refresh(cluster)` when given); `deadline` is on the monotonic clock. Once
        `should_stop()` (checked every `STOP_CHECK_S`), nothing more is waited for.
        """
        results: queue.Queue[FetchResult[_T] | _Listed] = queue.Queue()
        announced: dict[str, tuple[Target, ...]] = {}
        done: set[Target] = set()
        for cluster, targets in targets_of.items():
            threading.Thread(
                target=self._cluster_round,
                args=(cluster, targets, refresh, deadline, results),
                name=f"collector-{cluster}",
                daemon=True,
            ).start()
        expected = len(targets_of)
        while len(announced) < expected or len(done) < sum(map(len, announced.values())):
            remaining_s = deadline - self._monotonic()
            if remaining_s <= 0 or should_stop():
                break
            try:
                item = results.get(timeout=min(remaining_s, STOP_CHECK_S))
            except queue.Empty:
                continue
            if isinstance(item, _Listed):
                announced[item.cluster] = item.targets
                continue
            if item.target not in done:
                done.add(item.target)
                yield item
        # Past the deadline: whatever has not answered is a timeout, named once this round
        # (a cluster still listing its brokers: the brokers known now).
        now_ms = self._clock_ms()
        for cluster, targets_fn in targets_of.items():
            left = announced[cluster] if cluster in announced else tuple(targets_fn())
            for target in left:
                if target not in done:
                    done.add(target)
                    yield FetchResult(target, now_ms, error=RoundTimeout("no answer in the round"))

    def _cluster_round(
        self,
        cluster: str,
        targets_fn: Callable[[], Sequence[Target]],
        refresh: Callable[[str], None] | None,
        deadline: float,
        results: queue.Queue[FetchResult[_T] | _Listed],
    ) -> None:
        if refresh is not None:
            with self._lock:
                listing = cluster in self._listing
                self._listing.add(cluster)
            if not listing:  # an earlier round's listing that still runs is not doubled
                try:
                    refresh(cluster)
                finally:
                    with self._lock:
                        self._listing.discard(cluster)
        targets = tuple(targets_fn())
        results.put(_Listed(cluster, targets))
        slots = threading.BoundedSemaphore(self._max_parallel)
        for target in targets:
            with self._lock:
                busy = target in self._busy
                if not busy:
                    self._busy.add(target)
            if busy:
                results.put(
                    FetchResult(
                        target,
                        self._clock_ms(),
                        error=RoundTimeout("still answering an earlier round's poll"),
                    )
                )
                continue
            if not slots.acquire(timeout=max(0.0, deadline - self._monotonic())):
                with self._lock:
                    self._busy.discard(target)
                continue  # the round is over: the caller names it a timeout
            threading.Thread(
                target=self._fetch_one,
                args=(target, slots, results),
                name=f"collector-{target.label}",
                daemon=True,
            ).start()

    def _fetch_one(
        self,
        target: Target,
        slots: threading.BoundedSemaphore,
        results: queue.Queue[FetchResult[_T] | _Listed],
    ) -> None:
        poll_ms = self._clock_ms()
        try:
            answer = self._fetch(target)
        except Exception as exc:  # a down broker must never stop the others
            results.put(FetchResult(target, poll_ms, error=exc))
        else:
            results.put(FetchResult(target, poll_ms, answer=answer))
        finally:
            with self._lock:
                self._busy.discard(target)
            slots.release()
