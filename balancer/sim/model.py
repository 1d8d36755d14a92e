"""The state of a simulated peer group: clusters, brokers, namespaces, bundles, topics,
ledgers, offloads and every split applied, with the operations the admin API exposes.

Operations raise `SimError(status, reason)` for answers Pulsar gives as HTTP errors, and
`PeerRedirect(cluster)` when a namespace lives on a peer cluster. Thread-safe: every public
method holds the model's lock. Time comes from the `SimClock` only.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from balancer.core.bundles import BundleRange, InvalidBundle, NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad
from balancer.core.split import SplitError, compute_split
from balancer.core.topics import InvalidTopicName, parse_topic
from balancer.sim import brokers as broker_rules
from balancer.sim import ownership
from balancer.sim.faults import FaultInjector
from balancer.sim.ownership import initial_owner as _initial_owner
from balancer.sim.scenarios import Scenario
from balancer.sim.sim_clock import SimClock
from balancer.sim.snapshots import BrokerStatsView, topic_snapshot
from balancer.sim.splitting import (
    check_positions,
    choose_algorithm,
    split_options,
    validate_bundle,
)
from balancer.sim.state import (
    ClusterState,
    NamespaceState,
    NoopSplit,
    OwnerRedirect,
    PeerRedirect,
    SimError,
    SplitRecord,
    UnloadRecord,
)
from balancer.sim.stats import (
    Ledger,
    internal_stats,
    topic_stats,
)
from balancer.sim.storage import LEDGER_ID_STRIDE, LedgerStore, OffloadProgress
from balancer.sim.traffic import IntArray, TrafficModel

SPECIAL_BUNDLES = ("LARGEST", "HOT")
__all__ = [
    "LEDGER_ID_STRIDE",
    "ClusterState",
    "NamespaceState",
    "NoopSplit",
    "OwnerRedirect",
    "PeerRedirect",
    "SimError",
    "SimModel",
    "SplitRecord",
    "UnloadRecord",
]


class SimModel:
    def __init__(
        self, scenario: Scenario, clock: SimClock, *, faults: FaultInjector | None = None
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.faults = faults if faults is not None else FaultInjector(seed=scenario.seed)
        self.lock = threading.RLock()
        self.traffic = TrafficModel(scenario)
        table = self.traffic.table
        self.clusters: dict[str, ClusterState] = {
            c.name: ClusterState(
                c.name,
                c.brokers,
                list(c.peers),
                multi_host=c.multi_host_service_url,
                leader=c.leader_broker,
            )
            for c in scenario.clusters
        }
        self.namespaces: dict[str, NamespaceState] = {}
        for n, spec in enumerate(scenario.namespaces):
            idx = np.flatnonzero(table.namespace_index == n).astype(np.int64)
            order = np.argsort(table.positions[idx], kind="stable")
            idx = idx[order]
            layout = NamespaceBundles.initial(spec.name, spec.bundles)
            cluster_spec = next(c for c in scenario.clusters if c.name == spec.cluster)
            self.namespaces[spec.name] = NamespaceState(
                name=spec.name,
                cluster=spec.cluster,
                layout=layout,
                owners={
                    b: broker_rules.initial_owner(cluster_spec, spec, b) for b in layout.bundles
                },
                topic_indices=idx,
                sorted_positions=table.positions[idx],
                local_index={table.local_names[int(i)]: int(i) for i in idx},
                partitioned=dict(table.partitioned[n]),
                topic_buckets=spec.topic_buckets,
            )
        self.splits: list[SplitRecord] = []
        self.noop_splits: list[NoopSplit] = []
        self.unloads: list[UnloadRecord] = []
        # (cluster, namespace) -> the bundles a non-home cluster copied into its local
        # policies at its first read (balancer.sim.peers.local_bundles).
        self.local_bundle_copies: dict[tuple[str, str], NamespaceBundles] = {}
        self.storage = LedgerStore(
            msg_size_bytes=table.msg_size_bytes,
            ledger_max_size_bytes=scenario.broker.ledger_max_size_bytes,
            offload_duration_s=scenario.broker.offload_duration_s,
            start_ms=scenario.start_ms,
        )
        self.request_counts: Counter[tuple[str, str]] = Counter()  # (cluster, route) -> n
        # (cluster, broker index, route) -> n: who of a cluster's brokers was asked
        self.broker_request_counts: Counter[tuple[str, int, str]] = Counter()
        # Bumped by every layout or ownership change: broker-stats snapshots are rebuilt.
        self.layout_version = 0
        self.broker_stats = BrokerStatsView(self)
        # Capacity, load reports, moves, dynamic config (balancer.sim.brokers).
        self.brokers = broker_rules.BrokerFleet(self, scenario)

    # ----- time and bookkeeping -------------------------------------------------------

    def elapsed_s(self) -> float:
        return self.clock.elapsed_s()

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def count_request(self, cluster: str, route: str, broker: int | None = None) -> None:
        with self.lock:
            self.request_counts[(cluster, route)] += 1
            if broker is not None:
                self.broker_request_counts[(cluster, broker, route)] += 1

    def broker_requests(self, cluster: str, route: str) -> dict[int, int]:
        """Broker index -> requests for `route` it answered (every broker of `cluster`)."""
        with self.lock:
            return {
                b: self.broker_request_counts[(cluster, b, route)]
                for b in range(len(self.clusters[cluster].broker_urls))
            }

    def requests(self, *, route: str | None = None, cluster: str | None = None) -> int:
        """How many requests matched `route` (a route name such as "split") on `cluster`."""
        with self.lock:
            return sum(
                n
                for (c, r), n in self.request_counts.items()
                if (route is None or r == route) and (cluster is None or c == cluster)
            )

    def settle(self) -> None:
        self.storage.settle(self.elapsed_s())

    # ----- clusters and namespaces ------------------------------------------------------

    def cluster(self, name: str) -> ClusterState:
        c = self.clusters.get(name)
        if c is None:
            raise SimError(404, f"Cluster {name} does not exist")
        return c

    def set_peers(self, cluster: str, peers: Sequence[str]) -> None:
        with self.lock:
            c = self.cluster(cluster)
            for p in peers:
                if p == cluster:
                    raise SimError(412, "Own cluster cannot be part of peer cluster list")
                if p not in self.clusters:
                    raise SimError(412, f"Peer cluster {p} does not exist")
            c.peers = list(dict.fromkeys(peers))

    def tenants(self) -> list[str]:
        return sorted({ns.tenant for ns in self.namespaces.values()})

    def tenant_clusters(self, tenant: str) -> list[str]:
        clusters = sorted({ns.cluster for ns in self.namespaces.values() if ns.tenant == tenant})
        if not clusters:
            raise SimError(404, "Tenant does not exist")
        return clusters

    def namespaces_of(self, cluster: str, tenant: str) -> list[str]:
        """Every namespace of the tenant, whichever cluster asked: Pulsar lists them from the
        configuration store the clusters share (`NamespacesBase.internalGetTenantNamespaces`
        -> `NamespaceResources.listNamespacesAsync`), not from the cluster's own metadata."""
        self.tenant_clusters(tenant)
        return sorted(ns.name for ns in self.namespaces.values() if ns.tenant == tenant)

    def locate(self, cluster: str, namespace: str) -> NamespaceState:
        """The namespace if `cluster` holds it; else `PeerRedirect` to the first peer (in the
        cluster's peer order) that holds it; `SimError(412)` if no peer does; 404 if none
        of the group's clusters knows it."""
        with self.lock:
            ns = self.namespaces.get(namespace)
            if ns is None:
                raise SimError(404, "Namespace does not exist")
            if ns.cluster == cluster:
                return ns
            for peer in self.cluster(cluster).peers:
                if ns.cluster == peer:
                    raise PeerRedirect(peer)
            raise SimError(
                412,
                f"Namespace missing local cluster name in clusters list: local_cluster={cluster} "
                f"ns={namespace} clusters=[{ns.cluster}]",
            )

    def policies(self, ns: NamespaceState) -> dict[str, Any]:
        with self.lock:
            policies: dict[str, Any] = {
                "bundles": ns.layout.to_json(),
                "replication_clusters": [ns.cluster],
                "auth_policies": {"namespace_auth": {}, "destination_auth": {}},
                "deleted": False,
            }
            if ns.topic_buckets is not None:
                policies["numberOfTopicBuckets"] = ns.topic_buckets
            return policies

    # ----- bundles ------------------------------------------------------------------------

    def bundle_slice(self, ns: NamespaceState, bundle: BundleRange) -> IntArray:
        lo = int(np.searchsorted(ns.sorted_positions, bundle.lower, side="left"))
        if bundle.is_last:  # 0xffffffff itself belongs to the last bundle
            hi = int(np.searchsorted(ns.sorted_positions, bundle.upper, side="right"))
        else:
            hi = int(np.searchsorted(ns.sorted_positions, bundle.upper, side="left"))
        return ns.topic_indices[lo:hi]

    def resolve_bundle(
        self,
        ns: NamespaceState,
        text: str,
        *,
        allow_special: bool = False,
        absent_status: int = 412,
    ) -> BundleRange:
        with self.lock:
            if allow_special and text in SPECIAL_BUNDLES:
                return self._special_bundle(ns, text)
            try:
                bundle = BundleRange.parse(text)
            except InvalidBundle as exc:
                raise SimError(412, f"Invalid bundle range {text!r}: {exc}") from None
            if absent_status == 404:  # the topic list's bundle filter (not validateBundle)
                if not ns.layout.has(bundle):
                    raise SimError(404, f"Namespace bundle {ns.name}/{bundle} not found")
            else:
                validate_bundle(ns.layout, bundle)  # 412, as NamespaceBundles.validateBundle
            return bundle

    def _special_bundle(self, ns: NamespaceState, which: str) -> BundleRange:
        """LARGEST: most topics; HOT: highest msgRate in + out. Ties go to the lowest bundle."""
        rates = self.traffic.rates(self.elapsed_s())
        best: tuple[float, float, BundleRange] | None = None
        for b in ns.layout.bundles:
            idx = self.bundle_slice(ns, b)
            if which == "LARGEST":
                key: tuple[float, float] = (float(len(idx)), 0.0)
            else:
                key = (
                    float(rates.msg_rate_in[idx].sum() + rates.msg_rate_out[idx].sum()),
                    float(rates.throughput_in[idx].sum() + rates.throughput_out[idx].sum()),
                )
            if best is None or key > best[:2]:
                best = (*key, b)
        assert best is not None  # a layout always has at least one bundle
        return best[2]

    def topics_of_bundle(self, ns: NamespaceState, bundle: BundleRange | None) -> list[str]:
        with self.lock:
            names = self.traffic.table.full_names
            idx = ns.topic_indices if bundle is None else self.bundle_slice(ns, bundle)
            return [names[int(i)] for i in idx]

    def owner_of(self, ns: NamespaceState, position: int) -> int:
        with self.lock:
            return ns.owners[ns.layout.find(position)]

    def check_owner(
        self,
        ns: NamespaceState,
        bundle: BundleRange,
        broker: int,
        *,
        authoritative: bool = False,
        read_only: bool = False,
    ) -> None:
        """The owner lookup in front of a bundle or topic request on `broker`: 307 to the
        owner or the leader, 412 for a read of an unowned bundle (`balancer.sim.ownership`)."""
        with self.lock:
            taken = ownership.check_owner(
                ns,
                self.clusters[ns.cluster],
                bundle,
                broker,
                redirect_to_owner=self.scenario.broker.redirect_to_owner,
                authoritative=authoritative,
                read_only=read_only,
            )
            if taken:
                self.layout_version += 1

    def release_bundle(self, ns: NamespaceState, bundle: BundleRange) -> None:
        """No broker owns `bundle` now (as after its broker restarted: Pulsar's
        `OwnershipCache` entry is gone); the next owner lookup assigns it."""
        with self.lock:
            if not ns.layout.has(bundle):
                raise SimError(412, f"Bundle {ns.name}/{bundle} is not in the layout")
            ns.unowned.add(bundle)
            self.layout_version += 1

    def topic_loads(self, ns: NamespaceState, bundle: BundleRange) -> list[TopicLoad]:
        """The bundle's topics with their load now, as the split algorithms take them."""
        with self.lock:
            return self._topic_loads(ns, bundle)

    def _topic_loads(self, ns: NamespaceState, bundle: BundleRange) -> list[TopicLoad]:
        t = self.traffic.table
        rates = self.traffic.rates(self.elapsed_s())
        idx = self.bundle_slice(ns, bundle)
        return [
            TopicLoad(
                topic=t.full_names[i],
                position=int(t.positions[i]),
                msg_rate_in=float(rates.msg_rate_in[i]),
                msg_rate_out=float(rates.msg_rate_out[i]),
                msg_throughput_in=float(rates.throughput_in[i]),
                msg_throughput_out=float(rates.throughput_out[i]),
                producer_count=int(t.producers[i]),
                consumer_count=int(t.subscriptions[i] * t.consumers_per_subscription[i]),
            )
            for i in (int(x) for x in idx)
        ]

    def split_bundle(
        self,
        ns: NamespaceState,
        bundle_text: str,
        *,
        algorithm: str | None,
        boundaries: Sequence[int],
        unload: bool,
    ) -> SplitRecord | None:
        """Apply a split as a broker would; None when the algorithm finds no valid boundary."""
        with self.lock:
            broker = self.scenario.broker
            algo = choose_algorithm(algorithm, broker, boundaries)
            parent = self.resolve_bundle(ns, bundle_text, allow_special=True)
            check_positions(algo, parent, boundaries)
            options = split_options(broker, boundaries)
            try:
                result = compute_split(algo, parent, self._topic_loads(ns, parent), options)
            except SplitError as exc:
                raise SimError(412, str(exc)) from None
            now_ms = self.now_ms()
            if not result.is_split:
                self.noop_splits.append(NoopSplit(now_ms, ns.name, parent, algo.value))
                return None
            try:
                layout, children = ns.layout.split(parent, result.boundaries)
            except InvalidBundle as exc:
                raise SimError(412, str(exc)) from None
            owner = ns.owners.pop(parent)
            if unload:  # NamespaceService.splitAndOwnBundle unloads the children's topics
                self.settle()
                self.storage.unload(self.bundle_slice(ns, parent))
            brokers = self.clusters[ns.cluster].broker_count
            for child in children:
                ns.owners[child] = _initial_owner(ns.name, child, brokers) if unload else owner
            ns.layout = layout
            self.layout_version += 1
            record = SplitRecord(
                time_ms=now_ms,
                cluster=ns.cluster,
                namespace=ns.name,
                parent=parent,
                children=tuple(children),
                algorithm=algo.value,
                boundaries=tuple(result.boundaries),
                unloaded=unload,
            )
            self.splits.append(record)
            return record

    def unload_bundle(self, ns: NamespaceState, bundle_text: str) -> UnloadRecord:
        """Unloading moves the bundle to the next broker of the cluster (if there is one)."""
        with self.lock:
            bundle = self.resolve_bundle(ns, bundle_text)
            brokers = self.clusters[ns.cluster].broker_count
            before = ns.owners[bundle]
            ns.owners[bundle] = (before + 1) % brokers
            self.settle()
            self.storage.unload(self.bundle_slice(ns, bundle))  # statuses back to NOT_RUN
            self.layout_version += 1
            record = UnloadRecord(self.now_ms(), ns.name, bundle, before, ns.owners[bundle])
            self.unloads.append(record)
            return record

    def topic_hash_positions(
        self, ns: NamespaceState, bundle_text: str, topics: Sequence[str]
    ) -> dict[str, Any]:
        with self.lock:
            bundle = self.resolve_bundle(ns, bundle_text)
            positions: dict[str, int] = {}
            if not topics:
                for name in self.topics_of_bundle(ns, bundle):
                    positions[name] = hash_position(name)
            for raw in topics:
                try:
                    topic = parse_topic(raw)
                except InvalidTopicName as exc:
                    raise SimError(412, str(exc)) from None
                if topic.namespace_name != ns.name:
                    continue
                parts = ns.partitioned.get(topic.local_name, 0) if not topic.is_partition else 0
                names = [topic.partition(p).full for p in range(parts)] if parts else [topic.full]
                for name in names:
                    pos = hash_position(name)
                    if bundle.contains(pos):
                        positions[name] = pos
            return {"namespace": ns.name, "bundle": str(bundle), "topicHashPositions": positions}

    # ----- topics ---------------------------------------------------------------------------

    def topic_index(self, ns: NamespaceState, local_name: str) -> int:
        i = ns.local_index.get(local_name)
        if i is None:
            raise SimError(404, f"Topic persistent://{ns.name}/{local_name} not found")
        return i

    def partitions_of(self, ns: NamespaceState, local_name: str) -> int:
        return ns.partitioned.get(local_name, 0)

    def ledgers(self, i: int) -> tuple[list[Ledger], int]:
        """The topic's ledgers oldest first (the last is the current one) and the current
        ledger's size in bytes."""
        with self.lock:
            self.settle()
            return self.storage.ledgers(i, self._written(i))

    def _written(self, i: int) -> float:
        return float(self.traffic.bytes_written(self.elapsed_s())[i])

    def topic_stats(self, i: int) -> dict[str, Any]:
        with self.lock:
            self.settle()
            elapsed = self.elapsed_s()
            written = float(self.traffic.bytes_written(elapsed)[i])
            return topic_stats(topic_snapshot(self, i, elapsed, written))

    def internal_stats(self, i: int) -> dict[str, Any]:
        with self.lock:
            ledgers, current = self.ledgers(i)
            return internal_stats(
                ledgers=ledgers,
                current_ledger_size=current,
                now_ms=self.now_ms(),
                subscriptions=int(self.traffic.table.subscriptions[i]),
            )

    # ----- offload ---------------------------------------------------------------------------

    def trigger_offload(self, i: int, ledger_id: int, *, ns: NamespaceState) -> OffloadProgress:
        """Offload every closed, non-empty, not yet offloaded ledger with id < `ledger_id`;
        done after `offload_duration_s` of simulated time. 409 while one is running. Without
        an offloader (broker or namespace) it ends in ERROR at once, after the 204."""
        with self.lock:
            spec = next((s for s in self.scenario.namespaces if s.name == ns.name), None)
            offloader = self.scenario.broker.offloader and (spec is None or spec.offloader)
            return self.storage.trigger(
                i,
                ledger_id,
                written_bytes=self._written(i),
                now_s=self.elapsed_s(),
                will_fail=self.faults.offload_fails(),
                offloader=offloader,
            )

    def offload_status(self, i: int) -> dict[str, Any]:
        with self.lock:
            self.settle()
            return self.storage.status(i)
