"""From windowed loads to what the move decision works on: each broker's capacity (inferred
from its load report where it can be) and each bundle's owner and load.

A load report gives usages as ratios of limits, not what one msg/s or one byte/s costs. The
cost follows from the same report: a broker at cpu ratio 0.4 (weighted) while its bundles
carry 40,000 msg/s carries 100,000 msg/s at 1.0. A broker that carries nothing yet (just
started) has no such ratio: it gets the median of the inferred capacities of its cluster,
else the configured one.

Purely computational, with no side effects.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from balancer.core.broker_load import BrokerCapacity, BrokerLoad, LoadSource, LoadWeights, Resource
from balancer.core.load import BundleLoad
from balancer.core.moves.model import BrokerState, BundleState

# Below these, a ratio or a rate says too little to infer a capacity from (noise, baseline).
_MIN_RATIO = 0.02
_MIN_RATE = 1.0


def infer_capacity(load: BrokerLoad, weights: LoadWeights) -> BrokerCapacity | None:
    """What the broker carries at load 1.0, from its report's ratios and its bundles' rates;
    None when the report says too little (no report, or next to no load)."""
    if load.source is not LoadSource.LOAD_REPORT:
        return None
    cpu = load.resource_ratios.get(Resource.CPU, 0.0) * weights.cpu
    bandwidth = max(
        load.resource_ratios.get(Resource.BANDWIDTH_IN, 0.0) * weights.bandwidth_in,
        load.resource_ratios.get(Resource.BANDWIDTH_OUT, 0.0) * weights.bandwidth_out,
    )
    if cpu < _MIN_RATIO and bandwidth < _MIN_RATIO:
        return None
    if load.msg_rate < _MIN_RATE and load.throughput_bytes < _MIN_RATE:
        return None
    inf = float("inf")
    max_msg_rate = load.msg_rate / cpu if cpu >= _MIN_RATIO and load.msg_rate >= _MIN_RATE else inf
    max_throughput = (
        load.throughput_bytes / bandwidth
        if bandwidth >= _MIN_RATIO and load.throughput_bytes >= _MIN_RATE
        else inf
    )
    return BrokerCapacity(max_msg_rate=max_msg_rate, max_throughput_bytes=max_throughput)


def broker_states(
    loads: Sequence[BrokerLoad],
    *,
    weights: LoadWeights,
    configured: Mapping[str, BrokerCapacity],
    failure_domains: Mapping[str, str] | None = None,
) -> list[BrokerState]:
    """One state per broker load, sorted by broker id. `configured`: broker -> the capacity
    from the config (used where none can be inferred); `failure_domains`: broker -> domain."""
    inferred = {load.broker: infer_capacity(load, weights) for load in loads}
    known = [c for c in inferred.values() if c is not None]
    median = (
        BrokerCapacity(
            max_msg_rate=statistics.median(c.max_msg_rate for c in known),
            max_throughput_bytes=statistics.median(c.max_throughput_bytes for c in known),
        )
        if known
        else None
    )
    domains = failure_domains or {}
    out = []
    for load in sorted(loads, key=lambda item: item.broker):
        capacity = inferred[load.broker] or median or configured[load.broker]
        floor, traffic = _floor_and_traffic(load, weights)
        out.append(
            BrokerState(
                broker=load.broker,
                load_ratio=load.load_ratio,
                floor_ratio=floor,
                traffic_ratio=traffic,
                capacity=capacity,
                topic_count=load.topic_count,
                failure_domain=domains.get(load.broker),
            )
        )
    return out


def _floor_and_traffic(load: BrokerLoad, weights: LoadWeights) -> tuple[float, float]:
    """The load's part no move changes (memory, direct memory, weighted) and its part that
    follows traffic (cpu, bandwidth), each at most the load ratio (a projected load keeps
    the window's resource ratios, from before the moves)."""
    ratios = load.resource_ratios
    floor = max(
        ratios.get(Resource.MEMORY, 0.0) * weights.memory,
        ratios.get(Resource.DIRECT_MEMORY, 0.0) * weights.direct_memory,
    )
    floor = min(floor, load.load_ratio)
    if load.load_ratio > floor + 1e-9 or not ratios:
        return floor, load.load_ratio
    traffic = max(
        ratios.get(Resource.CPU, 0.0) * weights.cpu,
        ratios.get(Resource.BANDWIDTH_IN, 0.0) * weights.bandwidth_in,
        ratios.get(Resource.BANDWIDTH_OUT, 0.0) * weights.bandwidth_out,
    )
    return floor, min(traffic, load.load_ratio)


def bundle_states(
    bundles: Sequence[BundleLoad],
    owners: Mapping[str, str],
    last_moves_ms: Mapping[str, int],
) -> list[BundleState]:
    """The window's bundles whose owner is known (`owners`: "tenant/ns/range" -> broker),
    sorted by name; `last_moves_ms`: the last move this balancer applied per bundle name."""
    out = []
    for load in bundles:
        name = f"{load.namespace}/{load.bundle}"
        owner = owners.get(name)
        if owner is None:
            continue  # no broker reported it: no move starts from an unknown owner
        out.append(
            BundleState(
                namespace=load.namespace,
                bundle=load.bundle,
                owner=owner,
                msg_rate=load.msg_rate_in + load.msg_rate_out,
                throughput_bytes=load.msg_throughput_in + load.msg_throughput_out,
                sessions=load.session_count,
                topics=load.topic_count,
                last_moved_ms=last_moves_ms.get(name),
            )
        )
    return sorted(out, key=lambda b: b.name)
