"""Pulsar's broker-level answers, read into typed values: the load report (LocalBrokerData),
owned bundles (NamespaceOwnershipStatus), the leader (BrokerInfo), namespace isolation
policies and failure domains. Each parser raises `ResponseShapeError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from balancer.core.broker_load import BrokerLoadReport, LoadSource, Resource, ResourceUsage
from balancer.core.moves.model import IsolationPolicy
from balancer.pulsar.parsing import ResponseShapeError, integer, json_object, number

_ASSIGNMENTS = ("primary", "secondary", "shared")


@dataclass(frozen=True, slots=True)
class OwnedBundle:
    """One entry of `ownedNamespaces`: `tenant/ns/0x..._0x...` -> its ownership status.
    The broker's own heartbeat namespace (`pulsar/...`) is listed too."""

    name: str  # tenant/ns/0x..._0x... (V1 heartbeat: pulsar/<cluster>/<host:port>/0x.._0x..)
    broker_assignment: str  # primary | secondary | shared
    is_controlled: bool  # an isolation policy names the namespace
    is_active: bool

    @property
    def namespace(self) -> str:
        return self.name.rsplit("/", 1)[0]

    @property
    def bundle(self) -> str:
        return self.name.rsplit("/", 1)[1]


@dataclass(frozen=True, slots=True)
class LeaderBroker:
    """`GET /admin/v2/brokers/leaderBroker` (BrokerInfo): the load manager's leader."""

    service_url: str  # http(s)://host:port
    broker_id: str  # host:port; derived from service_url when an older Pulsar omits it


def _bool(body: Mapping[str, Any], key: str, what: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise ResponseShapeError(f"{what}.{key} must be a boolean, got {value!r}")
    return value


def _string(body: Mapping[str, Any], key: str, what: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ResponseShapeError(f"{what}.{key} must be a non-empty string, got {value!r}")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ResponseShapeError(f"{what} must be a list of strings")
    return tuple(value)


def parse_owned_bundles(body: Any) -> dict[str, OwnedBundle]:
    what = "ownedNamespaces"
    out: dict[str, OwnedBundle] = {}
    for name, raw in json_object(body if body is not None else {}, what).items():
        entry = json_object(raw, f"{what}[{name!r}]")
        where = f"{what}[{name!r}]"
        if "/" not in name:
            raise ResponseShapeError(f"{what}: key {name!r} is not namespace/bundle")
        assignment = entry.get("broker_assignment", "shared")
        if assignment not in _ASSIGNMENTS:
            raise ResponseShapeError(f"{where}.broker_assignment {assignment!r} is unknown")
        out[name] = OwnedBundle(
            name=name,
            broker_assignment=assignment,
            is_controlled=_bool(entry, "is_controlled", where),
            is_active=_bool(entry, "is_active", where),
        )
    return out


def parse_leader(body: Any) -> LeaderBroker:
    data = json_object(body, "leaderBroker")
    url = _string(data, "serviceUrl", "leaderBroker")
    broker_id = data.get("brokerId")
    if broker_id is None:
        broker_id = url.split("://", 1)[-1].rstrip("/")
    if not isinstance(broker_id, str) or not broker_id:
        raise ResponseShapeError(f"leaderBroker.brokerId must be a string, got {broker_id!r}")
    return LeaderBroker(service_url=url, broker_id=broker_id)


def parse_load_report(body: Any, *, cluster: str, broker: str, read_at_ms: int) -> BrokerLoadReport:
    """LocalBrokerData -> BrokerLoadReport timed `read_at_ms`. Its `lastUpdate` is when the
    broker last wrote the report to the metadata store (ModularLoadManagerImpl
    .writeBrokerDataOnZooKeeper, only on a > 10 % change or every 15 min), not when its
    usages were sampled: kept as `last_update_ms`, never used as the report's time."""
    what = f"load-report of {broker}"
    data = json_object(body, what)
    resources: dict[Resource, ResourceUsage] = {}
    for resource in Resource:
        raw = data.get(resource.value)
        if raw is None:
            continue
        usage = json_object(raw, f"{what}.{resource.value}")
        resources[resource] = ResourceUsage(
            usage=number(usage, "usage", f"{what}.{resource.value}"),
            limit=number(usage, "limit", f"{what}.{resource.value}"),
        )
    last_update = integer(data, "lastUpdate", what)
    bundles = data.get("bundles")
    if bundles is None:
        bundles = list(json_object(data.get("lastStats") or {}, f"{what}.lastStats"))
    return BrokerLoadReport(
        cluster=cluster,
        broker=broker,
        timestamp_ms=read_at_ms,
        last_update_ms=max(last_update, 0),
        resources=resources,
        msg_rate_in=number(data, "msgRateIn", what),
        msg_rate_out=number(data, "msgRateOut", what),
        msg_throughput_in=number(data, "msgThroughputIn", what),
        msg_throughput_out=number(data, "msgThroughputOut", what),
        num_topics=integer(data, "numTopics", what),
        num_bundles=integer(data, "numBundles", what),
        num_producers=integer(data, "numProducers", what),
        num_consumers=integer(data, "numConsumers", what),
        bundles=tuple(sorted(_strings(bundles, f"{what}.bundles"))),
    )


# BrokerLoadData.toMetrics: each resource's percentUsage under dimensions
# {metric: loadBalancing, broker: <advertised address>} (no `feature`).
_LOAD_METRICS = {
    Resource.CPU: "brk_lb_cpu_usage",
    Resource.MEMORY: "brk_lb_memory_usage",
    Resource.DIRECT_MEMORY: "brk_lb_directMemory_usage",
    Resource.BANDWIDTH_IN: "brk_lb_bandwidth_in_usage",
    Resource.BANDWIDTH_OUT: "brk_lb_bandwidth_out_usage",
}


def parse_load_metrics(
    body: Any, *, cluster: str, broker: str, read_at_ms: int
) -> BrokerLoadReport:
    """`GET /admin/v2/broker-stats/metrics` of one broker (a JSON list of Metrics
    {metrics, dimensions}) -> its resource usages as a BrokerLoadReport (origin METRICS,
    each usage in percent of a limit of 100; no rates: the bundles give them). Raises
    ResponseShapeError when the answer holds no `loadBalancing` usages (a broker whose load
    manager publishes none)."""
    what = f"broker-stats/metrics of {broker}"
    if not isinstance(body, list):
        raise ResponseShapeError(f"{what} must be a list of metrics")
    for i, raw in enumerate(body):
        entry = json_object(raw, f"{what}[{i}]")
        dims = json_object(entry.get("dimensions") or {}, f"{what}[{i}].dimensions")
        values = json_object(entry.get("metrics") or {}, f"{what}[{i}].metrics")
        if dims.get("metric") != "loadBalancing" or "feature" in dims:
            continue
        if _LOAD_METRICS[Resource.CPU] not in values:
            continue
        resources = {
            resource: ResourceUsage(usage=number(values, key, f"{what}[{i}]"), limit=100.0)
            for resource, key in _LOAD_METRICS.items()
            if key in values
        }
        return BrokerLoadReport(
            cluster=cluster,
            broker=broker,
            timestamp_ms=read_at_ms,
            resources=resources,
            origin=LoadSource.METRICS,
        )
    raise ResponseShapeError(f"{what} holds no loadBalancing usages (brk_lb_cpu_usage)")


def parse_isolation_policies(body: Any) -> tuple[IsolationPolicy, ...]:
    """Map of policy name -> NamespaceIsolationData, sorted by name. `min_primary_brokers`
    is the min_available policy's `min_limit` (1 when absent)."""
    what = "namespaceIsolationPolicies"
    out = []
    for name, raw in sorted(json_object(body if body is not None else {}, what).items()):
        where = f"{what}[{name!r}]"
        data = json_object(raw, where)
        failover = json_object(data.get("auto_failover_policy") or {}, where)
        params = json_object(failover.get("parameters") or {}, f"{where}.parameters")
        try:
            min_limit = int(params.get("min_limit", 1))
        except (TypeError, ValueError):
            raise ResponseShapeError(f"{where}.min_limit is not an integer") from None
        out.append(
            IsolationPolicy(
                name=name,
                namespaces=_strings(data.get("namespaces"), f"{where}.namespaces"),
                primary=_strings(data.get("primary"), f"{where}.primary"),
                secondary=_strings(data.get("secondary"), f"{where}.secondary"),
                min_primary_brokers=min_limit,
            )
        )
    return tuple(out)


def parse_failure_domains(body: Any) -> dict[str, tuple[str, ...]]:
    what = "failureDomains"
    return {
        name: _strings(json_object(raw, f"{what}[{name!r}]").get("brokers"), f"{what}.{name}")
        for name, raw in json_object(body if body is not None else {}, what).items()
    }


def parse_string_map(body: Any, what: str) -> dict[str, str]:
    data = json_object(body if body is not None else {}, what)
    out: dict[str, str] = {}
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str | int | float):
            raise ResponseShapeError(f"{what}.{key} must be a string, got {value!r}")
        out[key] = str(value)
    return out
