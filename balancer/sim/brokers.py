"""The brokers of the simulated clusters as a load balancer sees them (issue 35): what each
can carry, the load report computed from the bundles it owns, ownership listings, moves
(unload with a destination under the modular or the extensible load manager), placement
rules and dynamic configuration.

Each behaviour names the Pulsar class and method it copies. Every method expects the
model's lock held by the caller (the routes take it).
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from balancer.core.bundles import BundleRange
from balancer.sim import broker_loads
from balancer.sim.broker_scenarios import DYNAMIC_CONFIG_DEFAULTS, BrokerClusterSettings
from balancer.sim.ownership import active
from balancer.sim.scenarios import ClusterSpec, NamespaceSpec, Scenario
from balancer.sim.state import NamespaceState, OwnerRedirect, SimError

if TYPE_CHECKING:
    from balancer.sim.model import SimModel

INACTIVE_DESTINATION = "Not allowed unload namespace bundle to inactive destination broker"
# NamespacesBase.validateLeaderBrokerAsync: the leader has no web service URL for the
# request's scheme (e.g. an https request and a leader without webServicePortTls).
LEADER_URL_MISSING = "Redirected broker's service url is not configured."
# RestException(Throwable).getExceptionData for an exception without a message: what
# BrokerStatsBase.getLoadReport answers when ExtensibleLoadManagerWrapper.generateLoadReport
# throws UnsupportedOperationException.
UNSUPPORTED_LOAD_REPORT = (
    "\n --- An unexpected error occurred in the server ---\n\nMessage: null\n\n"
    "Stacktrace:\n\njava.lang.UnsupportedOperationException\n"
)
# ServiceConfiguration fields answered by configuration/runtime besides the dynamic ones.
_STATIC_CONFIG: dict[str, str] = {
    "loadManagerClassName": "",  # filled per cluster
    "loadBalancerLoadSheddingStrategy": (
        "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
    ),
    "loadBalancerBrokerMaxTopics": "50000",
    "loadBalancerSheddingGracePeriodMinutes": "30",
}
_LOAD_MANAGER_CLASS = {
    "modular": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    "extensible": "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl",
}


_QUOTED = re.compile(r"\\Q(.*?)(?:\\E|$)", re.DOTALL)


def java_fullmatch(pattern: str, text: str) -> bool:
    """Java's String.matches as Pulsar's NamespaceIsolationPolicyImpl uses it, for the syntax
    the simulator's scenarios use: Python's regex plus Java's quoting `\\Q...\\E` (a literal)."""
    python = _QUOTED.sub(lambda m: re.escape(m.group(1)), pattern)
    return re.fullmatch(python, text) is not None


def placement_hash(namespace: str, bundle: BundleRange, candidates: list[int]) -> int:
    """The simulator's placement: CRC32 of `ns/bundle` over the candidates in order (with
    every broker a candidate: `balancer.sim.ownership.initial_owner`)."""
    return candidates[zlib.crc32(f"{namespace}/{bundle}".encode()) % len(candidates)]


def isolation_candidates(spec: BrokerClusterSettings, namespace: str, brokers: int) -> list[int]:
    """Brokers a namespace may be placed on, as LoadManagerShared.applyNamespacePolicies:
    a namespace under a policy goes to its primaries (its secondaries when fewer than
    `min_limit` primaries exist); any other namespace only to brokers no policy names."""
    for policy in spec.isolation_policies:
        if any(java_fullmatch(p, namespace) for p in policy.namespaces):
            primary = sorted(set(policy.primary))
            if len(primary) >= policy.min_limit or not policy.secondary:
                return primary
            return sorted({*primary, *policy.secondary})
    named = {b for p in spec.isolation_policies for b in (*p.primary, *p.secondary)}
    free = [b for b in range(brokers) if b not in named]
    return free or list(range(brokers))


def initial_owner(spec: ClusterSpec, ns: NamespaceSpec, bundle: BundleRange) -> int:
    """Where a bundle starts: the namespace's `owner_broker` if set, else the placement hash
    over the brokers its isolation policy allows, minus `idle_brokers` (a restarted or newly
    added broker owns nothing). Without these keys this is
    `balancer.sim.ownership.initial_owner`, as before."""
    if ns.owner_broker is not None:
        return ns.owner_broker
    allowed = isolation_candidates(spec, ns.name, spec.brokers)
    busy = [b for b in allowed if b not in spec.idle_brokers] or allowed
    return placement_hash(ns.name, bundle, busy)


@dataclass
class MoveRecord:
    """One unload with a destination: where it was asked to go and where it landed (None
    while no broker owns it yet; `outcome` says why it ended as it did)."""

    time_ms: int
    cluster: str
    namespace: str
    bundle: BundleRange
    source: int | None  # None: no broker owned the bundle when asked
    destination: int
    load_manager: str
    landed: int | None = None
    landed_ms: int | None = None
    outcome: str = "pending"  # pending | landed | landed_elsewhere | not_owned | split


@dataclass(frozen=True)
class ConfigChange:
    time_ms: int
    cluster: str
    name: str
    value: str | None  # None: the override was deleted


class BrokerFleet:
    """Broker-level state of a model: pending moves, dynamic configuration, the move log."""

    def __init__(self, model: SimModel, scenario: Scenario) -> None:
        self.model = model
        self.specs: dict[str, ClusterSpec] = {c.name: c for c in scenario.clusters}
        self.moves: list[MoveRecord] = []
        self.config_changes: list[ConfigChange] = []
        # What each cluster's configuration store holds (configuration/values).
        self.dynamic: dict[str, dict[str, str]] = {
            c.name: dict(c.dynamic_config) for c in scenario.clusters
        }
        self._rng = random.Random(scenario.seed)
        self.lags = broker_loads.BrokerLoadLag()  # usage samples, store writes (issue 41)

    # ----- brokers ---------------------------------------------------------------------

    def broker_index(self, cluster: str, broker_id: str) -> int | None:
        c = self.model.cluster(cluster)
        ids = [c.broker_address(b) for b in range(c.broker_count)]
        index = ids.index(broker_id) if broker_id in ids else None
        # A broker that left is no active broker (an unload to it: 409 inactive destination).
        return None if index in c.stopped else index

    def owned(self, cluster: str, broker: int) -> list[tuple[NamespaceState, BundleRange]]:
        return [
            (ns, b)
            for ns in self.model.namespaces.values()
            if ns.cluster == cluster
            for b in ns.layout.bundles
            if ns.owners[b] == broker and b not in ns.unowned
        ]

    def bundle_stats(self, ns: NamespaceState, bundle: BundleRange) -> dict[str, float]:
        """NamespaceBundleStats of one bundle now (LocalBrokerData.lastStats)."""
        m = self.model
        t = m.traffic.table
        rates = m.traffic.rates(m.elapsed_s())
        idx = m.bundle_slice(ns, bundle)
        consumers = t.subscriptions[idx] * t.consumers_per_subscription[idx]
        return {
            "msgRateIn": float(rates.msg_rate_in[idx].sum()),
            "msgRateOut": float(rates.msg_rate_out[idx].sum()),
            "msgThroughputIn": float(rates.throughput_in[idx].sum()),
            "msgThroughputOut": float(rates.throughput_out[idx].sum()),
            "consumerCount": int(consumers.sum()),
            "producerCount": int(t.producers[idx].sum()),
            "topics": len(idx),
            "cacheSize": 0,
        }

    def load_report(self, cluster: str, broker: int) -> dict[str, Any]:
        """LocalBrokerData as ModularLoadManagerImpl.updateLocalBrokerData builds it, from
        the bundles the broker owns; resources from the capacity model
        (`balancer.sim.broker_scenarios.BrokerCapacitySpec`), cpu and bandwidth as last
        sampled and `lastUpdate` the last store write (`balancer.sim.broker_loads`). 500
        under the extensible load manager (ExtensibleLoadManagerWrapper.generateLoadReport
        throws)."""
        if self.specs[cluster].load_manager == "extensible":
            raise SimError(500, UNSUPPORTED_LOAD_REPORT)
        report = self._local_data(cluster, broker)
        report["lastUpdate"] = self.lags.last_update((cluster, broker), self.model.now_ms(), report)
        return report

    def broker_metrics(self, cluster: str, broker: int) -> list[dict[str, Any]]:
        """BrokerStatsBase.getMetrics: the broker's own metrics, its load among them: under
        the extensible load manager ExtensibleLoadManagerImpl.getMetrics ->
        BrokerLoadData.toMetrics; under the modular one the five usages alone
        (ModularLoadManagerImpl.updateLoadBalancingMetrics)."""
        report = self._local_data(cluster, broker)
        host = self.model.cluster(cluster).broker_address(broker).rsplit(":", 1)[0]
        if self.specs[cluster].load_manager != "extensible":
            return broker_loads.load_balancing_metrics(host, report, None)
        weights = 1.0  # ServiceConfiguration's loadBalancer*ResourceWeight defaults
        weighted = (
            max(
                broker_loads.percent(report[k]) * weights
                for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
            )
            / 100
        )
        ema = self.lags.weighted_max_ema((cluster, broker), weighted)
        return broker_loads.load_balancing_metrics(host, report, ema)

    def max_usage(self, cluster: str, broker: int) -> float:
        """BrokerLoadData's max resource usage (0..1, every weight Pulsar's default 1.0), as
        the broker last sampled it: what a placement strategy compares."""
        report = self._local_data(cluster, broker)
        resources = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
        return max(broker_loads.percent(report[k]) for k in resources) / 100

    def _local_data(self, cluster: str, broker: int) -> dict[str, Any]:
        spec = self.specs[cluster]
        cap = spec.capacity(broker)
        owned = self.owned(cluster, broker)
        last_stats = {f"{ns.name}/{b}": self.bundle_stats(ns, b) for ns, b in owned}
        total = {
            k: float(sum(s[k] for s in last_stats.values()))
            for k in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
        }
        msgs = total["msgRateIn"] + total["msgRateOut"]
        mbytes = (total["msgThroughputIn"] + total["msgThroughputOut"]) / 1e6
        cpu = cap.cpu_base_pct + cap.cpu_pct_per_kmsg * msgs / 1000 + cap.cpu_pct_per_mbyte * mbytes
        nic_kbit = cap.nic_limit_mbit * 1000
        # cpu and bandwidth as the broker's last once-a-minute sample shows them.
        sampled = self.lags.sampled(
            (cluster, broker),
            self.model.now_ms(),
            {
                "cpu": cpu,
                "bandwidthIn": total["msgThroughputIn"] * 8 / 1000,
                "bandwidthOut": total["msgThroughputOut"] * 8 / 1000,
            },
        )
        topics = sum(int(s["topics"]) for s in last_stats.values())
        c = self.model.cluster(cluster)
        address = c.broker_address(broker)
        return {
            "webServiceUrl": f"http://{address}",
            "webServiceUrlTls": c.web_service_url_tls(broker),  # null without a TLS port
            "pulsarServiceUrl": f"pulsar://{address}",
            "cpu": {"usage": sampled["cpu"], "limit": cap.cpu_cores * 100.0},
            "memory": {"usage": cap.memory_limit_mb * 0.25, "limit": cap.memory_limit_mb},
            "directMemory": {"usage": 64.0, "limit": cap.direct_memory_limit_mb},
            "bandwidthIn": {"usage": sampled["bandwidthIn"], "limit": nic_kbit},
            "bandwidthOut": {"usage": sampled["bandwidthOut"], "limit": nic_kbit},
            **total,
            "numTopics": topics,
            "numBundles": len(last_stats),
            "numConsumers": sum(int(s["consumerCount"]) for s in last_stats.values()),
            "numProducers": sum(int(s["producerCount"]) for s in last_stats.values()),
            "bundles": sorted(last_stats),
            "lastBundleGains": [],
            "lastBundleLosses": [],
            "lastStats": last_stats,
            "lastUpdate": 0,
            "brokerVersionString": "sim",
            "loadManagerClassName": _LOAD_MANAGER_CLASS[spec.load_manager],
        }

    def owned_namespaces(self, cluster: str, broker: int) -> dict[str, dict[str, Any]]:
        """NamespaceService.getOwnedNameSpacesStatus: every bundle the broker owns (the
        heartbeat's too), `shared` and not controlled unless an isolation policy names the
        namespace (getNamespaceOwnershipStatus: primary / secondary / shared)."""
        spec = self.specs[cluster]
        out: dict[str, dict[str, Any]] = {}
        for ns, b in self.owned(cluster, broker):
            assignment, controlled = "shared", False
            for policy in spec.isolation_policies:
                if any(java_fullmatch(p, ns.name) for p in policy.namespaces):
                    controlled = True
                    if broker in policy.primary:
                        assignment = "primary"
                    elif broker in policy.secondary:
                        assignment = "secondary"
                    break
            out[f"{ns.name}/{b}"] = {
                "broker_assignment": assignment,
                "is_controlled": controlled,
                "is_active": True,
            }
        settings = self.model.scenario.broker
        if settings.heartbeat_namespace:
            address = self.model.cluster(cluster).broker_address(broker)
            hb = (
                f"pulsar/{address}"
                if settings.heartbeat_topic_version == "V2"
                else f"pulsar/{cluster}/{address}"
            )
            out[f"{hb}/0x00000000_0xffffffff"] = {
                "broker_assignment": "shared",
                "is_controlled": False,
                "is_active": True,
            }
        return out

    def leader(self, cluster: str) -> dict[str, str]:
        """BrokersBase.getLeaderBroker: BrokerInfo {serviceUrl, brokerId}."""
        c = self.model.cluster(cluster)
        address = c.broker_address(c.leader)
        return {"serviceUrl": f"http://{address}", "brokerId": address}

    # ----- moves ---------------------------------------------------------------------------

    def check_destination(
        self, cluster: str, destination: str, broker: int, bundle_range: str
    ) -> int:
        """NamespacesBase.setNamespaceBundleAffinityAsync: 409 for a destination that is not
        an active broker; with the modular load manager 307 to the leader
        (validateLeaderBrokerAsync, authoritative=false) unless asked of the leader, whose
        `leader_service_url_missing` answers 412 "Redirected broker's service url is not
        configured." instead; then the leader KEEPS the destination under the bare
        `bundle_range` as sent (ModularLoadManagerImpl.setNamespaceBundleAffinity). All of
        this comes before any namespace or bundle check, as in Pulsar: a 404 or 412 after it
        leaves the entry behind."""
        dest = destination.removeprefix("http://").removeprefix("https://")
        index = self.broker_index(cluster, dest)
        if index is None:
            raise SimError(409, INACTIVE_DESTINATION)
        c = self.model.cluster(cluster)
        spec = self.specs[cluster]
        if spec.load_manager == "modular":
            if broker != c.leader:
                if spec.leader_service_url_missing:
                    raise SimError(412, LEADER_URL_MISSING)
                raise OwnerRedirect(cluster, c.leader, authoritative=False)
            c.affinity[bundle_range] = index
        return index

    def unload_to(self, ns: NamespaceState, bundle: BundleRange, destination: int) -> MoveRecord:
        """Unload `bundle` towards `destination` (the bundle is already validated).

        Modular (the destination was kept under the bundle's range by `check_destination`,
        then NamespaceService.unloadNamespaceBundle): the bundle is unowned now; the 204
        comes before the destination owns it (`settle` does the clients' lookup, which takes
        whatever the range's entry says by then). A bundle no broker owns is not unloaded
        (NamespacesBase.isBundleOwnedByAnyBroker), but the destination is still kept.
        Extensible (ExtensibleLoadManagerImpl.unloadNamespaceBundleAsync, a transfer): the
        destination owns it when the call returns.
        """
        m = self.model
        spec = self.specs[ns.cluster]
        owned = bundle not in ns.unowned
        record = MoveRecord(
            time_ms=m.now_ms(),
            cluster=ns.cluster,
            namespace=ns.name,
            bundle=bundle,
            source=ns.owners[bundle] if owned else None,
            destination=destination,
            load_manager=spec.load_manager,
        )
        self.moves.append(record)
        if spec.load_manager == "extensible":
            if not owned:
                record.outcome = "not_owned"
                return record
            if ns.owners[bundle] != destination:
                self._unload_topics(ns, bundle)
                ns.owners[bundle] = destination
            self._landed(record, destination)
            return record
        if owned:
            self._unload_topics(ns, bundle)
            ns.unowned.add(bundle)
        return record

    def _unload_topics(self, ns: NamespaceState, bundle: BundleRange) -> None:
        m = self.model
        m.settle()
        m.storage.unload(m.bundle_slice(ns, bundle))  # offload statuses back to NOT_RUN
        m.layout_version += 1

    def _landed(self, record: MoveRecord, broker: int) -> None:
        record.landed = broker
        record.landed_ms = self.model.now_ms()
        record.outcome = "landed" if broker == record.destination else "landed_elsewhere"

    def settle(self) -> None:
        """The clients' lookups after modular unloads: `reconnect_delay_s` after an unload the
        bundle's next lookup takes the destination kept for its RANGE (used up; another move
        of the same range in between overwrote it, and an earlier lookup of a same-range
        bundle took it: then the bundle goes to the least loaded allowed broker), or, with
        `move_elsewhere_probability`, a concurrent lookup placed it on the least loaded other
        broker first (apache/pulsar#24884)."""
        m = self.model
        elapsed_ms = m.now_ms()
        for record in self.moves:
            if record.outcome != "pending":
                continue
            ns = m.namespaces[record.namespace]
            if not ns.layout.has(record.bundle):
                record.outcome = "split"
                continue
            if record.bundle not in ns.unowned:  # a request's owner lookup took it already
                self._landed(record, ns.owners[record.bundle])
                continue
            delay_ms = self.specs[record.cluster].reconnect_delay_s * 1000
            if elapsed_ms < record.time_ms + delay_ms:
                continue
            spec = self.specs[record.cluster]
            kept = m.cluster(record.cluster).affinity.pop(str(record.bundle), None)
            target = kept if kept is not None else self._least_loaded(ns, exclude=None)
            if spec.move_elsewhere_probability and (
                self._rng.random() < spec.move_elsewhere_probability
            ):
                target = self._least_loaded(ns, exclude=target)
            # A destination that left: the client's lookup is placed among the active ones.
            target = active(m.cluster(record.cluster), ns, record.bundle, target)
            ns.unowned.discard(record.bundle)
            ns.owners[record.bundle] = target
            m.layout_version += 1
            self._landed(record, target)

    def _least_loaded(self, ns: NamespaceState, *, exclude: int | None) -> int:
        """LeastLongTermMessageRate's pick, simplified: the allowed broker with the lowest
        msg rate in + out now (ties to the lowest index), not `exclude`."""
        spec = self.specs[ns.cluster]
        candidates = isolation_candidates(spec, ns.name, spec.brokers)
        allowed = [b for b in candidates if b != exclude]
        if not allowed:
            return exclude if exclude is not None else candidates[0]

        def rate(b: int) -> float:
            return sum(
                s["msgRateIn"] + s["msgRateOut"]
                for s in (self.bundle_stats(n, x) for n, x in self.owned(ns.cluster, b))
            )

        return min(allowed, key=lambda b: (rate(b), b))

    # ----- dynamic configuration -----------------------------------------------------------

    def runtime_configuration(self, cluster: str) -> dict[str, str]:
        """BrokerService.getRuntimeConfiguration: every field with dynamic overrides applied."""
        spec = self.specs[cluster]
        out = {
            **_STATIC_CONFIG,
            "loadManagerClassName": _LOAD_MANAGER_CLASS[spec.load_manager],
            "failureDomainsEnabled": "true" if spec.failure_domains_enabled else "false",
        }
        out.update(DYNAMIC_CONFIG_DEFAULTS)
        out.update(self.dynamic[cluster])
        return out

    def set_dynamic(self, cluster: str, name: str, value: str) -> None:
        """BrokersBase.persistDynamicConfigurationAsync: 412 "Cannot update non-dynamic
        configuration" for a name that is not dynamic; the change is recorded."""
        known = set(DYNAMIC_CONFIG_DEFAULTS) | set(self.specs[cluster].dynamic_config)
        if name not in known:
            raise SimError(412, "Cannot update non-dynamic configuration")
        self.dynamic[cluster][name] = value
        self.config_changes.append(ConfigChange(self.model.now_ms(), cluster, name, value))

    def delete_dynamic(self, cluster: str, name: str) -> None:
        """BrokersBase.deleteDynamicConfigurationOnZk: 412 "Can't update non-dynamic
        configuration" for a name that is not dynamic; else the key leaves the map (a key
        not in it is no error: `old.remove(configName)`)."""
        known = set(DYNAMIC_CONFIG_DEFAULTS) | set(self.specs[cluster].dynamic_config)
        if name not in known:
            raise SimError(412, " Can't update non-dynamic configuration")
        self.dynamic[cluster].pop(name, None)
        self.config_changes.append(ConfigChange(self.model.now_ms(), cluster, name, None))

    # ----- placement rules -----------------------------------------------------------------

    def isolation_policies(self, cluster: str) -> dict[str, Any]:
        """ClustersBase.getNamespaceIsolationPolicies: 404 when none were ever set. Brokers
        are named by `host:port` regexes: every simulated broker has host 127.0.0.1, so a
        host regex could not tell them apart (Pulsar matches the host)."""
        c = self.model.cluster(cluster)
        policies = self.specs[cluster].isolation_policies
        if not policies:
            raise SimError(404, f"NamespaceIsolationPolicies for cluster {cluster} does not exist")
        return {
            p.name: {
                "namespaces": list(p.namespaces),
                "primary": [re.escape(c.broker_address(b)) for b in p.primary],
                "secondary": [re.escape(c.broker_address(b)) for b in p.secondary],
                "auto_failover_policy": {
                    "policy_type": "min_available",
                    "parameters": {
                        "min_limit": str(p.min_limit),
                        "usage_threshold": str(p.usage_threshold),
                    },
                },
            }
            for p in policies
        }

    def failure_domains(self, cluster: str) -> dict[str, Any]:
        """ClustersBase.getFailureDomains: domain -> {"brokers": [...]}, {} when none."""
        c = self.model.cluster(cluster)
        return {
            name: {"brokers": [c.broker_address(b) for b in members]}
            for name, members in self.specs[cluster].failure_domains.items()
        }
