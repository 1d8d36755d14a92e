"""Per-bundle roll-up of one window's per-topic values, with each namespace's current layout.

This is the plain-Python definition, one object per topic. The job computes the same on
Spark's executors in parts per PIP-157 bucket, merged by the driver (`streaming.driver.rollup`,
`streaming.stage.closing`; equal results, floats included, checked by property tests against this
module).

Purely computational, with no side effects: the layouts and the namespace topic counts are
passed in, and `SeenTopics` is plain in-memory bookkeeping owned by the caller.

Completeness of a bundle = topics that reported in the window / topics the bundle is known
to hold. Known = the topics whose newest closed window ended within `ttl_ms` before this
window's end (the caller expires `SeenTopics` at the window's end before rolling up),
mapped with the *current* layout, so a split re-assigns them to the children; when the
namespace's total topic count is known (admin API) and larger than what was seen, each
bundle's known count is scaled up by that ratio. Rates are exact sums rounded once
(`balancer.core.exact_sums`), independent of the order of the topics.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.load import BundleLoad, TopicLoad, roll_up


@dataclass(frozen=True, slots=True)
class TopicWindow:
    """One topic's values over one closed window."""

    cluster: str
    namespace: str
    window_end_ms: int
    load: TopicLoad
    samples: int = 1


class SeenTopics:
    """Topics seen per (cluster, namespace) with the event time they were last seen."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self._seen: dict[tuple[str, str], dict[str, tuple[int, int]]] = defaultdict(dict)

    def observe(self, windows: Iterable[TopicWindow]) -> None:
        for w in windows:
            topics = self._seen[(w.cluster, w.namespace)]
            previous = topics.get(w.load.topic)
            if previous is None or previous[1] < w.window_end_ms:
                topics[w.load.topic] = (w.load.position, w.window_end_ms)

    def observe_rows(self, rows: Iterable[tuple[str, str, str, int, int]]) -> None:
        """(cluster, namespace, topic, position, window end ms) per topic seen."""
        for cluster, namespace, topic, position, end_ms in rows:
            topics = self._seen[(cluster, namespace)]
            previous = topics.get(topic)
            if previous is None or previous[1] < end_ms:
                topics[topic] = (position, end_ms)

    def expire(self, now_ms: int) -> None:
        for key in list(self._seen):
            alive = {t: v for t, v in self._seen[key].items() if v[1] > now_ms - self.ttl_ms}
            if alive:
                self._seen[key] = alive
            else:
                del self._seen[key]

    def positions(self, cluster: str, namespace: str) -> list[int]:
        return [pos for pos, _ in self._seen.get((cluster, namespace), {}).values()]


def newest_window(windows: Iterable[TopicWindow]) -> int:
    """End of the newest window among `windows` (0 when there are none)."""
    return max((w.window_end_ms for w in windows), default=0)


def roll_up_window(
    windows: Iterable[TopicWindow],
    *,
    window_end_ms: int,
    layouts: Mapping[tuple[str, str], NamespaceBundles],
    seen: SeenTopics,
    namespace_known: Mapping[tuple[str, str], int | None],
) -> list[BundleLoad]:
    """Bundle loads (with their topics) of the window ending at `window_end_ms`.

    Only bundles with at least one reporting topic appear. `layouts` must hold every
    (cluster, namespace) of the window's topics.
    """
    by_bundle: dict[tuple[str, str, BundleRange], list[TopicLoad]] = defaultdict(list)
    for w in windows:
        if w.window_end_ms != window_end_ms:
            continue
        layout = layouts[(w.cluster, w.namespace)]
        by_bundle[(w.cluster, w.namespace, layout.find(w.load.position))].append(w.load)
    known_by_bundle: dict[tuple[str, str, BundleRange], int] = defaultdict(int)
    scale: dict[tuple[str, str], float] = {}
    for cluster, namespace in {(c, ns) for c, ns, _ in by_bundle}:
        layout = layouts[(cluster, namespace)]
        positions = seen.positions(cluster, namespace)
        for position in positions:
            known_by_bundle[(cluster, namespace, layout.find(position))] += 1
        total = namespace_known.get((cluster, namespace))
        scale[(cluster, namespace)] = (
            total / len(positions)
            if total is not None and positions and total > len(positions)
            else 1.0
        )
    out = []
    for (cluster, namespace, bundle), topics in sorted(
        by_bundle.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])
    ):
        seen_known = max(len(topics), known_by_bundle[(cluster, namespace, bundle)])
        known = math.ceil(seen_known * scale[(cluster, namespace)] - 1e-9)
        out.append(
            roll_up(
                cluster=cluster,
                namespace=namespace,
                bundle=bundle,
                window_end_ms=window_end_ms,
                topics=tuple(sorted(topics, key=lambda t: (t.position, t.topic))),
                known_topics=known,
            )
        )
    return out


def without_topics(bundle: BundleLoad) -> BundleLoad:
    return replace(bundle, topics=())
