"""Scenario keys of a cluster's brokers: capacity, load manager, placement rules and dynamic
configuration (issue 35). Every key has a default under which a scenario behaves as before.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Pulsar's dynamic configuration the simulator knows, with Pulsar's defaults
# (ServiceConfiguration: both `dynamic = true`). Others may be added per cluster.
DYNAMIC_CONFIG_DEFAULTS: dict[str, str] = {
    "loadBalancerSheddingEnabled": "true",
    "loadBalancerAutoBundleSplitEnabled": "true",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BrokerCapacitySpec(_Strict):
    """What one broker can carry, and how its cpu follows its traffic.

    Bandwidth is reported as Pulsar's LinuxBrokerHostUsageImpl does: kilobits per second,
    usage over the NIC's limit, in = bytes received (producers), out = bytes sent
    (consumers). Cpu is percent of one core (limit = cores x 100):
    `cpu_base_pct + cpu_pct_per_kmsg x (msg/s in+out) / 1000 + cpu_pct_per_mbyte x
    (MB/s in+out)`. `cpu_base_pct` is what an idle JVM burns (GC, timers, ZooKeeper and
    BookKeeper clients): 20 % of a core is 2.5 % of 8 cores, a normal idle broker.
    """

    nic_limit_mbit: float = Field(10_000.0, gt=0)  # a 10 Gbit/s NIC
    cpu_cores: int = Field(8, ge=1)
    cpu_base_pct: float = Field(20.0, ge=0)
    cpu_pct_per_kmsg: float = Field(2.0, ge=0)
    cpu_pct_per_mbyte: float = Field(4.0, ge=0)
    memory_limit_mb: float = Field(8192.0, gt=0)
    direct_memory_limit_mb: float = Field(4096.0, gt=0)


class IsolationPolicySpec(_Strict):
    """A namespace isolation policy (Pulsar's NamespaceIsolationData): namespaces (regexes)
    on primary brokers, secondary ones when fewer than `min_limit` primaries are up.
    Brokers are broker indices of the cluster."""

    name: str = Field(pattern=r"^[-=:.\w]+$")
    namespaces: list[str] = Field(min_length=1)
    primary: list[int] = Field(min_length=1)
    secondary: list[int] = Field(default_factory=list)
    min_limit: int = Field(1, ge=0)
    usage_threshold: int = Field(100, ge=0)


class BrokerClusterSettings(_Strict):
    """Mixed into ClusterSpec: the cluster's brokers as a load balancer sees them."""

    broker_capacity: BrokerCapacitySpec = Field(default_factory=BrokerCapacitySpec)  # type: ignore[arg-type]
    # Broker index -> its own capacity (brokers of different sizes).
    broker_overrides: dict[int, BrokerCapacitySpec] = Field(default_factory=dict)
    # `loadManagerClassName`: ModularLoadManagerImpl (Pulsar's default) or
    # ExtensibleLoadManagerImpl (PIP-192): how an unload with a destination behaves.
    load_manager: Literal["modular", "extensible"] = "modular"
    # Modular only: the chance that a concurrent lookup places an unloaded bundle on another
    # broker than the destination asked for (apache/pulsar#24884).
    move_elsewhere_probability: float = Field(0.0, ge=0, le=1)
    # Simulated seconds between an unload and the clients' lookup that assigns the bundle
    # (Pulsar's client backoff starts at 100 ms).
    reconnect_delay_s: float = Field(0.1, ge=0)
    # Brokers that own nothing at start (restarted or just added): bundles are placed on
    # the others.
    idle_brokers: list[int] = Field(default_factory=list)
    isolation_policies: list[IsolationPolicySpec] = Field(default_factory=list)
    # Failure domain name -> broker indices.
    failure_domains: dict[str, list[int]] = Field(default_factory=dict)
    # ServiceConfiguration.failureDomainsEnabled (static, default false): only then does
    # LoadManagerShared.filterAntiAffinityGroupOwnedBrokers spread a group over domains.
    failure_domains_enabled: bool = False
    # Modular only: the leader has no web service URL for the request's scheme, so a
    # non-leader answers an unload with destination 412 "Redirected broker's service url is
    # not configured." (NamespacesBase.validateLeaderBrokerAsync) instead of its 307.
    leader_service_url_missing: bool = False
    # Dynamic configuration at start (over DYNAMIC_CONFIG_DEFAULTS).
    dynamic_config: dict[str, str] = Field(default_factory=dict)

    def check_brokers(self, brokers: int) -> None:
        """ValueError naming the key when a broker index is not one of the cluster's."""
        named: list[tuple[str, int]] = [("broker_overrides", b) for b in self.broker_overrides]
        named += [("idle_brokers", b) for b in self.idle_brokers]
        for i, p in enumerate(self.isolation_policies):
            named += [(f"isolation_policies.{i}", b) for b in (*p.primary, *p.secondary)]
        for name, members in self.failure_domains.items():
            named += [(f"failure_domains.{name}", b) for b in members]
        for where, b in named:
            if not 0 <= b < brokers:
                raise ValueError(f"{where}: broker {b} is not one of {brokers}")
        if len(set(self.idle_brokers)) >= brokers:
            raise ValueError("idle_brokers: at least one broker must own the bundles")

    def capacity(self, broker: int) -> BrokerCapacitySpec:
        return self.broker_overrides.get(broker, self.broker_capacity)
