"""From windowed loads to what the move decision works on: each broker's capacity (inferred
from its load report where it can be) and each bundle's owner and load.

A load report gives usages as ratios of limits, not what one msg/s or one byte/s costs. The
cost follows from the same report: a broker at cpu ratio 0.4 (weighted) while its bundles
carry 40,000 msg/s carries 100,000 msg/s at 1.0. Only a broker carrying real load says it:
a nearly idle one's cpu is mostly its JVM's baseline (2-3 %), so 100 msg/s over 2.5 % would
read as a 4,000 msg/s broker, and under 1 msg/s as an infinite one. So each term (msg rate
from cpu, throughput from bandwidth) is inferred only from a broker whose resource ratio is
at least `MIN_TERM_RATIO` and whose traffic is at least `MIN_SHARE` of its cluster's mean,
bounded to within `BOUND` times the cluster's median of that term; every other broker takes
that median, else the configured capacity. Never infinite.

Purely computational, with no side effects.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from balancer.core.broker_load import BrokerCapacity, BrokerLoad, LoadWeights, Resource
from balancer.core.load import BundleLoad
from balancer.core.moves.model import BrokerState, BundleState

MIN_TERM_RATIO = 0.05  # a resource ratio under this is mostly baseline and noise
MIN_SHARE = 0.25  # of the cluster's mean msg rate (or throughput) per broker
BOUND = 10.0  # an inferred term stays within [median / BOUND, median x BOUND]


@dataclass(frozen=True, slots=True)
class InferredCapacity:
    """What a broker's report says it carries at load 1.0, per term (None: it says too
    little for that term)."""

    max_msg_rate: float | None
    max_throughput_bytes: float | None


def infer_capacity(
    load: BrokerLoad,
    weights: LoadWeights,
    *,
    mean_msg_rate: float = 0.0,
    mean_throughput_bytes: float = 0.0,
) -> InferredCapacity:
    """Each term of what the broker carries at load 1.0, from its report's ratios and its
    bundles' rates, where they say enough (see the module docstring); `mean_*`: the
    cluster's mean per broker."""
    if not load.source.measured:
        return InferredCapacity(None, None)
    cpu = load.resource_ratios.get(Resource.CPU, 0.0) * weights.cpu
    bandwidth = max(
        load.resource_ratios.get(Resource.BANDWIDTH_IN, 0.0) * weights.bandwidth_in,
        load.resource_ratios.get(Resource.BANDWIDTH_OUT, 0.0) * weights.bandwidth_out,
    )
    by_rate = (
        load.msg_rate / cpu
        if cpu >= MIN_TERM_RATIO
        and load.msg_rate > 0
        and load.msg_rate >= MIN_SHARE * mean_msg_rate
        else None
    )
    by_bytes = (
        load.throughput_bytes / bandwidth
        if bandwidth >= MIN_TERM_RATIO
        and load.throughput_bytes > 0
        and load.throughput_bytes >= MIN_SHARE * mean_throughput_bytes
        else None
    )
    return InferredCapacity(by_rate, by_bytes)


def _settle(terms: dict[str, float | None], configured: Mapping[str, float]) -> dict[str, float]:
    """Each broker's term: its own bounded to within BOUND of the median of those inferred,
    else that median, else the configured one."""
    known = [v for v in terms.values() if v is not None]
    if not known:
        return {b: configured[b] for b in terms}
    median = statistics.median(known)
    return {
        b: median if v is None else min(max(v, median / BOUND), median * BOUND)
        for b, v in terms.items()
    }


def capacities(
    loads: Sequence[BrokerLoad],
    *,
    weights: LoadWeights,
    configured: Mapping[str, BrokerCapacity],
) -> dict[str, BrokerCapacity]:
    """Broker -> its capacity for the decision (inferred, bounded, filled; never infinite)."""
    reported = [load for load in loads if load.source.measured]
    n = max(len(reported), 1)
    mean_rate = sum(load.msg_rate for load in reported) / n
    mean_bytes = sum(load.throughput_bytes for load in reported) / n
    inferred = {
        load.broker: infer_capacity(
            load, weights, mean_msg_rate=mean_rate, mean_throughput_bytes=mean_bytes
        )
        for load in loads
    }
    rates = _settle(
        {b: c.max_msg_rate for b, c in inferred.items()},
        {b: configured[b].max_msg_rate for b in inferred},
    )
    throughputs = _settle(
        {b: c.max_throughput_bytes for b, c in inferred.items()},
        {b: configured[b].max_throughput_bytes for b in inferred},
    )
    return {
        b: BrokerCapacity(max_msg_rate=rates[b], max_throughput_bytes=throughputs[b])
        for b in inferred
    }


def broker_states(
    loads: Sequence[BrokerLoad],
    *,
    weights: LoadWeights,
    configured: Mapping[str, BrokerCapacity],
    failure_domains: Mapping[str, str] | None = None,
) -> list[BrokerState]:
    """One state per broker load, sorted by broker id. `configured`: broker -> the capacity
    from the config (used where none can be inferred); `failure_domains`: broker -> domain."""
    capacity = capacities(loads, weights=weights, configured=configured)
    domains = failure_domains or {}
    out = []
    for load in sorted(loads, key=lambda item: item.broker):
        floor, traffic = _floor_and_traffic(load, weights)
        cpu, bandwidth = _resources(load, weights)
        out.append(
            BrokerState(
                broker=load.broker,
                load_ratio=load.load_ratio,
                floor_ratio=floor,
                traffic_ratio=traffic,
                cpu_ratio=cpu,
                bandwidth_ratio=bandwidth,
                capacity=capacity[load.broker],
                topic_count=load.topic_count,
                failure_domain=domains.get(load.broker),
            )
        )
    return out


def _resources(load: BrokerLoad, weights: LoadWeights) -> tuple[float | None, float | None]:
    """The report's cpu and bandwidth (the larger direction), weighted; (None, None) where
    the report gives neither (a load from bundles only: one number)."""
    ratios = load.resource_ratios
    if not any(r in ratios for r in (Resource.CPU, Resource.BANDWIDTH_IN, Resource.BANDWIDTH_OUT)):
        return None, None
    cpu = ratios.get(Resource.CPU, 0.0) * weights.cpu
    bandwidth = max(
        ratios.get(Resource.BANDWIDTH_IN, 0.0) * weights.bandwidth_in,
        ratios.get(Resource.BANDWIDTH_OUT, 0.0) * weights.bandwidth_out,
    )
    return cpu, bandwidth


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
