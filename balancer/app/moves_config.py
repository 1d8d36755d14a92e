"""`moves`: balancing the brokers by moving bundles (`unload?destinationBroker=`).

Kept apart from `config` (already long); `BalancerConfig` nests it as `moves`. Defaults are
the targets of `balancer.core.moves.model.MoveSettings` and Pulsar's resource weights.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from pydantic import BaseModel, ConfigDict, Field

from balancer.core.broker_load import BrokerCapacity, LoadWeights
from balancer.core.moves.model import MoveSettings

# Pulsar's *Mbytes settings are MiB (LoadManagerShared.MIBI): so is max_throughput_mbytes.
MIBYTE = 1024 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class WeightsConfig(_Model):
    """Pulsar's loadBalancer*ResourceWeight, with ServiceConfiguration's defaults: all 1.0
    (memory's is deprecated since 3.0.0 but still 1.0 and still counted by
    LocalBrokerData.getMaxResourceUsageWithWeight and BrokerLoadData)."""

    cpu: float = Field(default=1.0, ge=0)
    memory: float = Field(default=1.0, ge=0)
    direct_memory: float = Field(default=1.0, ge=0)
    bandwidth_in: float = Field(default=1.0, ge=0)
    bandwidth_out: float = Field(default=1.0, ge=0)

    def weights(self) -> LoadWeights:
        return LoadWeights(
            cpu=self.cpu,
            memory=self.memory,
            direct_memory=self.direct_memory,
            bandwidth_in=self.bandwidth_in,
            bandwidth_out=self.bandwidth_out,
        )


class CapacityConfig(_Model):
    """What one broker carries, for brokers without a load report (extensible load manager)."""

    max_msg_rate: float = Field(default=200_000.0, gt=0)  # msg/s, in + out
    max_throughput_mbytes: float = Field(
        default=200.0, gt=0, description="MiB/s (2^20 bytes/s), in + out, at load 1.0"
    )

    def capacity(self) -> BrokerCapacity:
        return BrokerCapacity(
            max_msg_rate=self.max_msg_rate,
            max_throughput_bytes=self.max_throughput_mbytes * MIBYTE,
        )


class CapacityOverride(CapacityConfig):
    cluster: str = Field(min_length=1)
    broker: str = "*"  # fnmatch glob over the broker id host:port


class MovesConfig(_Model):
    enabled: bool = True
    margin: float = Field(default=0.10, ge=0, le=1)  # balanced: every broker <= mean + margin
    overload_ratio: float = Field(default=0.85, gt=0, le=1)  # and none over this
    grace_period_s: float = Field(default=1800.0, ge=0)  # a bundle is not moved again within
    max_moves_per_cycle: int = Field(default=40, ge=0)  # per cluster and decision cycle
    max_moves_per_broker: int = Field(default=15, ge=1)  # out of or into one broker, per cycle
    min_bundle_load_ratio: float = Field(default=0.01, ge=0, le=1)
    max_topics_per_broker: int = Field(default=50_000, ge=1)  # loadBalancerBrokerMaxTopics
    # The pace a draining broker is emptied at: moves in flight (sent, not yet owned at the
    # destination) out of one draining broker, and drain moves decided per cluster a minute.
    drain_moves_in_flight_per_broker: int = Field(default=4, ge=1)
    drain_moves_per_minute: int = Field(default=20, ge=1)
    weights: WeightsConfig = WeightsConfig()
    # Read each broker's load-report every collector round; off (or unanswered): load from
    # the broker's bundles against `broker_capacity`.
    read_load_reports: bool = True
    broker_capacity: CapacityConfig = CapacityConfig()
    capacity_overrides: tuple[CapacityOverride, ...] = ()

    def settings(self) -> MoveSettings:
        return MoveSettings(
            margin=self.margin,
            overload_ratio=self.overload_ratio,
            grace_period_s=self.grace_period_s,
            max_moves_per_cluster=self.max_moves_per_cycle,
            max_moves_per_broker=self.max_moves_per_broker,
            min_bundle_load_ratio=self.min_bundle_load_ratio,
            weights=self.weights.weights(),
        )

    def capacity_of(self, cluster: str, broker: str) -> BrokerCapacity:
        """The configured capacity of a broker: the first matching override, else the default."""
        for override in self.capacity_overrides:
            if override.cluster == cluster and fnmatchcase(broker, override.broker):
                return override.capacity()
        return self.broker_capacity.capacity()
