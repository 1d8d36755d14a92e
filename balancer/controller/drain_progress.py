"""How far each drain has come, fed by the move planner each cycle: the bundles each
draining broker still owns (system namespaces left out: they never move), and the drains
started and finished (the exporter's `pulsar_balancer_drain_*` series).

A drain starts when this process first sees a broker marked draining, and finishes the
first time that broker is seen owning no bundle that is to leave it while still marked.
Unmarked before it is empty, it is neither finished nor counted again until marked anew.
A draining broker not read this cycle keeps its last count (a failed poll is no progress);
one never read yet is not shown.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping

from balancer.core.moves.placement import is_system_namespace


class DrainProgress:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # the planner writes, the exporter reads
        self._left: dict[str, dict[str, int]] = {}  # cluster -> draining broker -> bundles
        self._done: set[tuple[str, str]] = set()  # (cluster, broker): finished, still marked
        self._started: dict[str, int] = {}  # cluster -> drains started (not yet taken)
        self._finished: dict[str, int] = {}  # cluster -> drains finished (not yet taken)

    def observe(
        self,
        cluster: str,
        draining: frozenset[str],
        owners: Mapping[str, str],
        read: Collection[str],
    ) -> None:
        """One cycle's view: `owners` is bundle name -> broker as the planner read it from
        the brokers in `read`."""
        left = dict.fromkeys((b for b in draining if b in read), 0)
        for name, broker in owners.items():
            if broker in left and not is_system_namespace(name.rpartition("/")[0]):
                left[broker] += 1
        with self._lock:
            before = self._left.get(cluster, {})
            left.update({b: n for b, n in before.items() if b in draining and b not in read})
            for broker in sorted(left):
                if broker not in before:
                    self._started[cluster] = self._started.get(cluster, 0) + 1
                if left[broker] == 0 and (cluster, broker) not in self._done:
                    self._done.add((cluster, broker))
                    self._finished[cluster] = self._finished.get(cluster, 0) + 1
            self._done = {(c, b) for c, b in self._done if c != cluster or b in left}
            self._left[cluster] = left

    def bundles_left(self, cluster: str) -> dict[str, int]:
        """Draining broker -> the bundles it still owns that are to leave it."""
        with self._lock:
            return dict(self._left.get(cluster, {}))

    def take_counts(self, cluster: str) -> tuple[int, int]:
        """The drains (started, finished) since the last call, for counters."""
        with self._lock:
            return self._started.pop(cluster, 0), self._finished.pop(cluster, 0)
