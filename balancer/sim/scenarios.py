"""Scenario files: YAML describing clusters, namespaces, topics and their traffic shapes.

Loaded once, validated by pydantic (unknown keys are errors); a bad file fails with a
`ScenarioError` naming the offending key, e.g. `namespaces.0.topic_groups.1.zipf_exponent`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from balancer.sim.broker_scenarios import BrokerClusterSettings
from balancer.support.yamlfile import read_yaml

SplitAlgorithmName = Literal[
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
    "flow_or_qps_equally_divide",
]

_NAMESPACE = re.compile(r"^[-=:.\w]+/[-=:.\w]+$")
_LOCAL_NAME = re.compile(r"^[^/\s]+$")
_DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message names the file and the bad key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BrokerSettings(_Strict):
    """Broker configuration shared by every simulated broker (Pulsar's defaults)."""

    default_split_algorithm: SplitAlgorithmName = "range_equally_divide"
    # supportedNamespaceBundleSplitAlgorithms (Pulsar's ServiceConfiguration; this default is
    # today's; Pulsar 2.10 had only range_equally_divide and topic_count_equally_divide): a
    # split naming another algorithm is answered 412, as NamespacesBase does. Any name is
    # accepted here, as a broker's config file accepts any.
    supported_split_algorithms: tuple[str, ...] = (
        "range_equally_divide",
        "topic_count_equally_divide",
        "specified_positions_divide",
        "flow_or_qps_equally_divide",
    )
    max_msg_rate: float = Field(30000.0, gt=0)  # loadBalancerNamespaceBundleMaxMsgRate
    # loadBalancerNamespaceBundleMaxBandwidthMbytes
    max_bandwidth_mbytes: float = Field(100.0, gt=0)
    flow_or_qps_difference_threshold_pct: float = Field(10.0, ge=0)
    # broker-stats/topics is a snapshot refreshed every statsUpdateFrequencyInSecs.
    stats_update_interval_s: float = Field(60.0, ge=0)
    offload_duration_s: float = Field(30.0, ge=0)
    ledger_max_size_bytes: int = Field(256 * 1024 * 1024, gt=0)
    # Answer bundle and topic requests on a broker that does not own the bundle with 307 to
    # the owner (Pulsar does; off by default so any broker answers everything).
    redirect_to_owner: bool = False
    # Storage integrates throughput-in over a fixed grid of this many simulated seconds.
    integration_step_s: float = Field(60.0, gt=0)
    # Pulsar's exposePublisherStats: false leaves broker-stats' `publishers` lists empty
    # (PersistentTopic.updateRates); `producerCount` still counts the producers.
    expose_publisher_stats: bool = True
    # Pulsar's statsUpdateInitialDelayInSecs (its default is 60): until the first
    # PulsarStats.updateStats a broker answers broker-stats/topics with an empty body.
    stats_initial_delay_s: float = Field(0.0, ge=0)
    # A V1 heartbeat namespace `pulsar/<cluster>/<host:port>` per broker in broker-stats
    # (NamespaceService.getHeartbeatNamespace; brokers make it unless topicVersion=V2).
    heartbeat_namespace: bool = True
    # The health check's topicVersion (`brokers healthcheck --topic-version`, BrokersBase
    # .healthCheck): V2 writes to the V2 heartbeat namespace `pulsar/<host:port>`
    # (NamespaceService.getHeartbeatNamespaceV2) instead of the V1 one.
    heartbeat_topic_version: Literal["V1", "V2"] = "V1"
    # A tiered-storage offloader (managedLedgerOffloadDriver). Without one the managed ledger
    # has Pulsar's NullLedgerOffloader: a trigger answers 204 and the offload ends in ERROR
    # "NullLedgerOffloader" (ManagedLedgerImpl.asyncOffloadPrefix).
    offloader: bool = True


class ClusterSpec(BrokerClusterSettings):  # broker keys: balancer.sim.broker_scenarios
    name: str = Field(pattern=r"^[-=:.\w]+$")
    brokers: int = Field(1, ge=1, le=16)
    peers: list[str] = Field(default_factory=list)
    # ClusterData serviceUrl names a second listener of broker 0 (another port), not the
    # admin URL a client is given: like a load balancer or another DNS name in front of a
    # real cluster. Peer redirects (307) to this cluster then carry that URL.
    service_url_alias: bool = False
    # ClusterData serviceUrl lists every broker, `http://h0:p0,h1:p1` (the multi-host form
    # Pulsar's PulsarServiceNameResolver reads); a 307 to this cluster takes one of them.
    multi_host_service_url: bool = False
    # The broker (index) holding the load manager's leadership: an owner lookup for an
    # unowned bundle on another broker is forwarded to it (NamespaceService.findBrokerServiceUrl).
    leader_broker: int = Field(0, ge=0)
    # Each broker also serves https on a second port (webServicePortTls, a self-signed
    # certificate): its id keeps the plain port (`host:8080` beside `https://host:8443`).
    tls_web_port: bool = False
    # Brokers of a release before apache/pulsar PR #21894: a request for another broker is
    # redirected to `<request scheme>://<id>` (PulsarWebResource.validateBrokerName).
    legacy_broker_redirect: bool = False

    @model_validator(mode="after")
    def _sane(self) -> ClusterSpec:
        if self.leader_broker >= self.brokers:
            raise ValueError(f"leader_broker {self.leader_broker} is not one of {self.brokers}")
        if self.multi_host_service_url and self.service_url_alias:
            raise ValueError("multi_host_service_url and service_url_alias exclude each other")
        self.check_brokers(self.brokers)
        return self


class TopicGroupSpec(_Strict):
    """`count` topics `{name}-{i}` (just `{name}` when count is 1), each optionally partitioned.

    The group's `total_msg_rate_in` is spread over its topics by a Zipf law of
    `zipf_exponent` (0 = even) over a seeded random ranking; partitions of one topic share
    their topic's rate evenly.
    """

    name: str = Field(pattern=_LOCAL_NAME.pattern)
    count: int = Field(1, ge=1, le=1_000_000)
    partitions: int = Field(0, ge=0, le=10_000)
    total_msg_rate_in: float = Field(0.0, ge=0)
    zipf_exponent: float = Field(0.0, ge=0, le=10)
    avg_msg_size_bytes: float = Field(1024.0, gt=0)
    producers_per_topic: int = Field(1, ge=0)
    subscriptions: int = Field(1, ge=0)
    consumers_per_subscription: int = Field(1, ge=0)
    initial_storage_bytes: int = Field(0, ge=0)
    backlog_s: float = Field(0.0, ge=0)  # consumers lag this far behind: backlog = in * lag


class OutstandingTopicSpec(_Strict):
    """A topic with an explicit rate, overriding its group's share (or added to the namespace)."""

    topic: str = Field(pattern=_LOCAL_NAME.pattern)  # local name, e.g. orders-partition-3
    msg_rate_in: float = Field(ge=0)
    avg_msg_size_bytes: float | None = Field(None, gt=0)
    producers: int | None = Field(None, ge=0)
    subscriptions: int | None = Field(None, ge=0)
    consumers_per_subscription: int | None = Field(None, ge=0)
    initial_storage_bytes: int | None = Field(None, ge=0)
    backlog_s: float | None = Field(None, ge=0)


class StepChange(_Strict):
    """Rates of the matching topics are multiplied by `factor` from `at_s` on."""

    kind: Literal["step"]
    at_s: float = Field(ge=0)
    factor: float = Field(ge=0)
    topics: list[str] = Field(default_factory=list)  # globs on local names; empty = all


class RampChange(_Strict):
    """Rates of the matching topics go linearly from x1 at `from_s` to x`factor` at `to_s`."""

    kind: Literal["ramp"]
    from_s: float = Field(ge=0)
    to_s: float = Field(gt=0)
    factor: float = Field(ge=0)
    topics: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ordered(self) -> RampChange:
        if self.to_s <= self.from_s:
            raise ValueError(f"to_s ({self.to_s}) must be after from_s ({self.from_s})")
        return self


Change = Annotated[StepChange | RampChange, Field(discriminator="kind")]


class DailyCycle(_Strict):
    """Rate x (1 + amplitude * cos(2*pi*(hour - peak_hour_utc)/24))."""

    amplitude: float = Field(ge=0, lt=1)
    peak_hour_utc: float = Field(14.0, ge=0, lt=24)


class NamespaceSpec(_Strict):
    name: str = Field(pattern=_NAMESPACE.pattern)  # tenant/namespace
    cluster: str  # the one cluster of the peer group that holds it (replication_clusters)
    bundles: int = Field(4, ge=1, le=4096)
    topic_buckets: int | None = Field(None, ge=1)  # numberOfTopicBuckets (PIP-157)
    topic_groups: list[TopicGroupSpec] = Field(default_factory=list)
    outstanding: list[OutstandingTopicSpec] = Field(default_factory=list)
    changes: list[Change] = Field(default_factory=list)
    daily_cycle: DailyCycle | None = None
    # False: no offloader for this namespace (no offload policies, none on the broker):
    # offloads end in ERROR "NullLedgerOffloader", as with broker.offloader false.
    offloader: bool = True
    # The namespace's anti-affinity group (local policies, `namespaces set-anti-affinity-group`)
    anti_affinity_group: str | None = None
    # Every bundle starts on this broker (index of its cluster) instead of the placement
    # hash: e.g. one hot broker holding a namespace's many small bundles.
    owner_broker: int | None = Field(None, ge=0)

    @property
    def tenant(self) -> str:
        return self.name.split("/", 1)[0]


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    start_time: datetime = _DEFAULT_START
    # Multiplicative gaussian noise on rates, redrawn every noise_interval_s (0 = none).
    noise_pct: float = Field(0.0, ge=0, lt=100)
    noise_interval_s: float = Field(60.0, gt=0)
    broker: BrokerSettings = Field(default_factory=BrokerSettings)  # type: ignore[arg-type]
    clusters: list[ClusterSpec] = Field(min_length=1)
    namespaces: list[NamespaceSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [c.name for c in self.clusters]
        _unique(names, "clusters")
        for i, c in enumerate(self.clusters):
            for peer in c.peers:
                if peer not in names:
                    raise ValueError(f"clusters.{i}.peers: unknown cluster {peer!r}")
                if peer == c.name:
                    raise ValueError(f"clusters.{i}.peers: a cluster cannot be its own peer")
        _unique([n.name for n in self.namespaces], "namespaces")
        for i, ns in enumerate(self.namespaces):
            if ns.cluster not in names:
                raise ValueError(f"namespaces.{i}.cluster: unknown cluster {ns.cluster!r}")
            brokers = next(c.brokers for c in self.clusters if c.name == ns.cluster)
            if ns.owner_broker is not None and ns.owner_broker >= brokers:
                raise ValueError(
                    f"namespaces.{i}.owner_broker: broker {ns.owner_broker} is not one of {brokers}"
                )
            _unique([g.name for g in ns.topic_groups], f"namespaces.{i}.topic_groups")
            _unique([o.topic for o in ns.outstanding], f"namespaces.{i}.outstanding")
        return self

    @property
    def start_ms(self) -> int:
        start = self.start_time
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        return int(start.timestamp() * 1000)


def _unique(values: list[str], where: str) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{where}: duplicate name {v!r}")
        seen.add(v)


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        # Cross-field checks name their key in the message itself.
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


def parse_scenario(data: Any, *, source: str = "<scenario>") -> Scenario:
    """Validate an already-parsed YAML/JSON document."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {_format_errors(exc)}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file."""
    data = read_yaml(path, ScenarioError, "scenario file")
    return parse_scenario(data, source=str(path))
