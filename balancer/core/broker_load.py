"""A broker's load, defined once: the largest of its resource usages over their limits, each
times a weight (Pulsar's `LocalBrokerData.getMaxResourceUsageWithWeight`), plus the windowed
msg rate and throughput of the bundles it owns.

A `BrokerLoadReport` is one sample of Pulsar's `GET /admin/v2/broker-stats/load-report`
(the modular load manager's `LocalBrokerData`). Brokers whose report is not available (the
extensible load manager answers that route with an error) get a load derived from their
bundles against a configured `BrokerCapacity`, and say so in `BrokerLoad.source`.

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from balancer.core.load import BundleLoad


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
    """Weights of each resource in a broker's load. Defaults are Pulsar's
    (`loadBalancerCPUResourceWeight`, `...BandwithInResourceWeight`, `...BandwithOutResourceWeight`
    1.0; memory and direct memory 0 in current releases)."""

    cpu: float = 1.0
    memory: float = 0.0
    direct_memory: float = 0.0
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


@dataclass(frozen=True, slots=True)
class BrokerLoadReport:
    """One sample of a broker's load report (`LocalBrokerData`), as the collector read it."""

    cluster: str
    broker: str  # broker id, `host:port` as `GET /admin/v2/brokers/{cluster}` lists it
    timestamp_ms: int  # when the collector read it (the report's lastUpdate when given)
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


@dataclass(frozen=True, slots=True)
class BrokerCapacity:
    """What a broker can carry when no load report says it: the fallback for brokers under
    the extensible load manager (configured per cluster, optionally per broker)."""

    max_msg_rate: float  # msg/s, in + out
    max_throughput_bytes: float  # bytes/s, in + out


class LoadSource(StrEnum):
    LOAD_REPORT = "load_report"  # resource usages from the broker's load report
    BUNDLES = "bundles"  # no report: its bundles' load against a configured capacity


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
    raise NotImplementedError


def broker_load_from_reports(
    reports: Sequence[BrokerLoadReport],
    bundles: Sequence[BundleLoad],
    *,
    weights: LoadWeights,
    window_end_ms: int,
) -> BrokerLoad:
    """The window's load of one broker from the load reports read within the window (usages
    averaged) and the windowed loads of the bundles it owns."""
    raise NotImplementedError


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
    raise NotImplementedError
