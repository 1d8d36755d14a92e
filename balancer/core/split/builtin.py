"""Pulsar's four bundle split algorithms, ported for the same boundaries Pulsar computes.

Each is a pure function of the bundle, the topics with their loads and the options, and
returns the boundaries exactly as Pulsar's `*BundleSplitAlgorithm.getSplitBoundary` would,
quirks included: `()` stands for Pulsar's `null` / empty result ("no valid boundary", a
no-op). The raw result is not checked here; Pulsar's own split step rejects boundaries not
strictly inside the bundle, and `compute_split` does the same with a `SplitError`.

Topics outside the bundle are ignored (Pulsar only looks at the bundle's owned topics).
Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Sequence

from balancer.core.bundles import BundleRange
from balancer.core.load import TopicLoad
from balancer.core.split.model import SplitError, SplitOptions, topics_in

_DEFAULT = SplitOptions()


def range_equally_divide(
    bundle: BundleRange, topics: Sequence[TopicLoad] = (), options: SplitOptions = _DEFAULT
) -> tuple[int, ...]:
    """Pulsar's default: the middle of the range, `lower + (upper - lower) / 2`; topics ignored."""
    return (bundle.lower + (bundle.upper - bundle.lower) // 2,)


def topic_count_equally_divide(
    bundle: BundleRange, topics: Sequence[TopicLoad], options: SplitOptions = _DEFAULT
) -> tuple[int, ...]:
    """Halve the topic count: the midpoint of the two middle hashes (no `+ 1`, unlike flow).

    No result with <= 1 topic. Topics with equal hashes all count, as in Pulsar's list.
    """
    hashes = sorted(t.position for t in topics_in(bundle, topics))
    n = len(hashes)
    if n <= 1:
        return ()
    start = hashes[max(n // 2 - 1, 0)]
    end = hashes[n // 2]
    return (start + (end - start) // 2,)


def specified_positions_divide(
    bundle: BundleRange, topics: Sequence[TopicLoad], options: SplitOptions = _DEFAULT
) -> tuple[int, ...]:
    """PIP-143: the caller's positions strictly inside the bundle, sorted.

    Empty positions are an error; no result when the bundle has <= 1 topic (unless
    `options.force`) or when no position lies strictly inside. Duplicates are kept, as in
    Pulsar (its split step then rejects them).
    """
    if not options.positions:
        raise SplitError("SplitBoundaries can't be empty")
    if not options.force and len(topics_in(bundle, topics)) <= 1:
        return ()
    return tuple(p for p in sorted(options.positions) if bundle.lower < p < bundle.upper)


def flow_or_qps_equally_divide(
    bundle: BundleRange, topics: Sequence[TopicLoad], options: SplitOptions = _DEFAULT
) -> tuple[int, ...]:
    """Pulsar's greedy one-pass split by msgRate (in + out) and throughput (in + out).

    Quirks kept on purpose, so the result equals Pulsar's:
    - topics with msgRate <= 0 and throughput <= 0 are skipped;
    - per-topic loads are kept in a map keyed by hash: topics sharing a hash all count in
      the bundle totals and appear once per topic in the sorted hash list, but every one of
      them is looked up as the load of the last such topic seen;
    - "fewer than 2 active topics" counts distinct hashes;
    - no result if BOTH the bundle msgRate < max * (1 + pct/100) AND throughput < max bytes
      * (1 + pct/100);
    - boundaries `h[i-1] + (h[i] - h[i-1]) / 2 + 1`, which can repeat (equal hashes) or reach
      the bundle's upper end; Pulsar's split then rejects them.
    """
    max_rate = options.max_msg_rate
    max_bytes = options.max_bandwidth_bytes
    pct = options.difference_threshold_pct / 100.0
    if len(topics_in(bundle, topics)) <= 1:
        return ()
    by_hash: dict[int, tuple[float, float]] = {}
    hashes: list[int] = []
    bundle_rate = 0.0
    bundle_bytes = 0.0
    for t in topics_in(bundle, topics):
        rate, throughput = t.msg_rate, t.throughput_bytes
        if rate <= 0 and throughput <= 0:
            continue
        hashes.append(t.position)
        by_hash[t.position] = (rate, throughput)
        bundle_rate += rate
        bundle_bytes += throughput
    if len(by_hash) < 2 or (
        bundle_rate < max_rate * (1 + pct) and bundle_bytes < max_bytes * (1 + pct)
    ):
        return ()
    hashes.sort()
    run_rate, run_bytes = by_hash[hashes[0]]
    boundaries: list[int] = []
    for i in range(1, len(hashes)):
        rate, throughput = by_hash[hashes[i]]
        if (
            run_rate > max_rate
            or run_bytes > max_bytes
            or run_rate + rate > max_rate
            or run_bytes + throughput > max_bytes
        ):
            start, end = hashes[i - 1], hashes[i]
            boundaries.append(start + (end - start) // 2 + 1)
            run_rate, run_bytes = rate, throughput
        else:
            run_rate += rate
            run_bytes += throughput
    return tuple(boundaries)
