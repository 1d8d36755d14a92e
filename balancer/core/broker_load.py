"""A broker's load, defined once: the largest of its resource usages over their limits, each
times a weight (Pulsar's `LocalBrokerData.getMaxResourceUsageWithWeight`), plus the windowed
msg rate and throughput of the bundles it owns.

A `BrokerLoadReport` is one sample of Pulsar's `GET /admin/v2/broker-stats/load-report`
(the modular load manager's `LocalBrokerData`), or of the same usages in
`GET /admin/v2/broker-stats/metrics` (`BrokerLoadData.toMetrics`: the extensible load
manager answers load-report with a 500). Brokers with neither get a load derived from
their bundles against a configured `BrokerCapacity`, and say so in `BrokerLoad.source`.

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from math import fsum

from balancer.core.load import BundleLoad

# How often a broker samples its cpu and bandwidth (Pulsar's
# loadBalancerHostUsageCheckIntervalMinutes, 1): each sample is the average over the interval
# before it (LinuxBrokerHostUsageImpl: usage deltas between two collections).
USAGE_INTERVAL_MS = 60_000
# A report polled this long after an unload shows none of the old layout: its newest sample
# may have been taken up to one interval before the poll and averages the interval before
# that, so one interval is not enough (the first report after a move still shows old load).
REPORT_SETTLE_MS = 2 * USAGE_INTERVAL_MS


class Resource(StrEnum):
    """The resources of `LocalBrokerData`, spelt as Pulsar's JSON keys."""

    CPU = "cpu"
    MEMORY = "memory"
    DIRECT_MEMORY = "directMemory"
    BANDWIDTH_IN = "bandwidthIn"
    BANDWIDTH_OUT = "bandwidthOut"


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """Pulsar's `ResourceUsage`: `usage` and `limit` in the resource's own unit (percent of
    a core for cpu, MB for memory, KB/s for bandwidth). A limit <= 0 means unknown."""

    usage: float
    limit: float

    @property
    def ratio(self) -> float:
        """usage / limit (0.0 when the limit is unknown): 1.0 is a resource used up."""
        return self.usage / self.limit if self.limit > 0 else 0.0


@dataclass(frozen=True, slots=True)
class LoadWeights:
    """Weights of each resource in a broker's load. Defaults are Pulsar's (ServiceConfiguration
    `loadBalancer{CPU,Memory,DirectMemory,BandwithIn,BandwithOut}ResourceWeight`: all 1.0 in
    3.x and 4.x; the memory weight is deprecated since 3.0.0 yet still 1.0 and counted)."""

    cpu: float = 1.0
    memory: float = 1.0
    direct_memory: float = 1.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0

    def of(self, resource: Resource) -> float:
        return {
            Resource.CPU: self.cpu,
            Resource.MEMORY: self.memory,
            Resource.DIRECT_MEMORY: self.direct_memory,
            Resource.BANDWIDTH_IN: self.bandwidth_in,
            Resource.BANDWIDTH_OUT: self.bandwidth_out,
        }[resource]


class LoadSource(StrEnum):
    LOAD_REPORT = "load_report"  # resource usages from the broker's load report (modular)
    # The same usages from `GET /admin/v2/broker-stats/metrics` (`brk_lb_*`, what the
    # extensible load manager publishes: its load-report route answers 500).
    METRICS = "metrics"
    BUNDLES = "bundles"  # no usages: its bundles' load against a configured capacity

    @property
    def measured(self) -> bool:
        """The broker's own resource usages, not a configured guess."""
        return self is not LoadSource.BUNDLES


@dataclass(frozen=True, slots=True)
class BrokerLoadReport:
    """One sample of a broker's load report (`LocalBrokerData`), as the collector read it."""

    cluster: str
    broker: str  # broker id, `host:port` as `GET /admin/v2/brokers/{cluster}` lists it
    timestamp_ms: int  # when the balancer polled it (its own clock: never lastUpdate)
    resources: Mapping[Resource, ResourceUsage]
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0  # bytes/s
    msg_throughput_out: float = 0.0  # bytes/s
    num_topics: int = 0
    num_bundles: int = 0
    num_producers: int = 0
    num_consumers: int = 0
    bundles: tuple[str, ...] = ()  # "tenant/ns/0x..._0x..." the broker owns
    # LocalBrokerData.lastUpdate: when the broker last WROTE its report to the metadata store
    # (ModularLoadManagerImpl.writeBrokerDataOnZooKeeper: on a > 10 % change or every 15
    # min), not when the usages were sampled. Kept for display only; 0 when not given.
    last_update_ms: int = 0
    origin: LoadSource = LoadSource.LOAD_REPORT  # the route read (LOAD_REPORT or METRICS)


@dataclass(frozen=True, slots=True)
class BrokerCapacity:
    """What a broker can carry when no load report says it: the fallback for brokers under
    the extensible load manager (configured per cluster, optionally per broker)."""

    max_msg_rate: float  # msg/s, in + out
    max_throughput_bytes: float  # bytes/s, in + out


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """A broker's load over one window."""

    cluster: str
    broker: str
    window_end_ms: int
    load_ratio: float  # max over resources of usage / limit x weight; 1.0 is full
    source: LoadSource
    resource_ratios: Mapping[Resource, float] = field(default_factory=dict)  # unweighted
    msg_rate: float = 0.0  # msg/s, in + out, of the bundles it owns (windowed)
    throughput_bytes: float = 0.0  # bytes/s, in + out, of the bundles it owns (windowed)
    bundle_count: int = 0
    topic_count: int = 0
    samples: int = 0  # load reports averaged into this window (0 with source BUNDLES)


def load_ratio(resources: Mapping[Resource, ResourceUsage], weights: LoadWeights) -> float:
    """Pulsar's `getMaxResourceUsageWithWeight`: max over resources of ratio x weight."""
    # Copies org.apache.pulsar.policies.data.loadbalancer.LocalBrokerData
    # .getMaxResourceUsageWithWeight: max(percentUsage x weight) / 100, where percentUsage is
    # 0 for a limit <= 0 (ResourceUsage.percentUsage). A missing resource counts as unused.
    return max((usage.ratio * weights.of(r) for r, usage in resources.items()), default=0.0)


def _averaged_resources(reports: Sequence[BrokerLoadReport]) -> dict[Resource, ResourceUsage]:
    """Each resource's usage and limit averaged over the reports that carry it."""
    sums: dict[Resource, list[float]] = {}
    for report in reports:
        for resource, usage in report.resources.items():
            acc = sums.setdefault(resource, [0.0, 0.0, 0.0])
            acc[0] += usage.usage
            acc[1] += usage.limit
            acc[2] += 1.0
    return {
        r: ResourceUsage(usage=acc[0] / acc[2], limit=acc[1] / acc[2])
        for r, acc in sorted(sums.items())
    }


def broker_load_from_reports(
    reports: Sequence[BrokerLoadReport],
    bundles: Sequence[BundleLoad],
    *,
    weights: LoadWeights,
    window_end_ms: int,
) -> BrokerLoad:
    """The window's load of one broker from the load reports read within the window (usages
    averaged) and the windowed loads of the bundles it owns.

    Without bundle loads (none given), the msg rate, throughput and counts are the reports'
    own figures (rates averaged, counts from the newest report). Raises ValueError for no
    reports or reports of more than one broker: the caller groups them.
    """
    if not reports:
        raise ValueError("broker_load_from_reports needs at least one load report")
    ids = {(r.cluster, r.broker) for r in reports}
    if len(ids) != 1:
        raise ValueError(f"load reports of more than one broker: {sorted(ids)}")
    cluster, broker = next(iter(ids))
    resources = _averaged_resources(reports)
    # Averaging a window's samples damps a one-sample spike without the long memory of
    # ThresholdShedder's 0.9 history EMA (apache/pulsar#18173): the window is the history.
    if bundles:
        msg_rate = fsum(b.msg_rate for b in bundles)
        throughput = fsum(b.throughput_bytes for b in bundles)
        bundle_count = len(bundles)
        topic_count = sum(b.topic_count for b in bundles)
    else:
        n = len(reports)
        msg_rate = fsum(r.msg_rate_in + r.msg_rate_out for r in reports) / n
        throughput = fsum(r.msg_throughput_in + r.msg_throughput_out for r in reports) / n
        newest = max(reports, key=lambda r: r.timestamp_ms)
        bundle_count = newest.num_bundles
        topic_count = newest.num_topics
    return BrokerLoad(
        cluster=cluster,
        broker=broker,
        window_end_ms=window_end_ms,
        load_ratio=load_ratio(resources, weights),
        source=max(reports, key=lambda r: r.timestamp_ms).origin,
        resource_ratios={r: u.ratio for r, u in resources.items()},
        msg_rate=msg_rate,
        throughput_bytes=throughput,
        bundle_count=bundle_count,
        topic_count=topic_count,
        samples=len(reports),
    )


def bundle_load_ratio(msg_rate: float, throughput_bytes: float, capacity: BrokerCapacity) -> float:
    """A load against a capacity: the larger of msg rate / max_msg_rate and throughput /
    max_throughput_bytes (a capacity <= 0 counts as unknown: that term is 0)."""
    by_rate = msg_rate / capacity.max_msg_rate if capacity.max_msg_rate > 0 else 0.0
    by_bytes = (
        throughput_bytes / capacity.max_throughput_bytes
        if capacity.max_throughput_bytes > 0
        else 0.0
    )
    return max(by_rate, by_bytes)


def broker_load_from_bundles(
    cluster: str,
    broker: str,
    bundles: Sequence[BundleLoad],
    *,
    capacity: BrokerCapacity,
    window_end_ms: int,
) -> BrokerLoad:
    """The fallback: the larger of msg rate / max_msg_rate and throughput /
    max_throughput_bytes of the bundles the broker owns (source BUNDLES)."""
    msg_rate = fsum(b.msg_rate for b in bundles)
    throughput = fsum(b.throughput_bytes for b in bundles)
    return BrokerLoad(
        cluster=cluster,
        broker=broker,
        window_end_ms=window_end_ms,
        load_ratio=bundle_load_ratio(msg_rate, throughput, capacity),
        source=LoadSource.BUNDLES,
        msg_rate=msg_rate,
        throughput_bytes=throughput,
        bundle_count=len(bundles),
        topic_count=sum(b.topic_count for b in bundles),
        samples=0,
    )
