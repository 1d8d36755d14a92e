"""`ours`' simulated Pulsar: a layout (bundles per namespace, their owners) that the
balancer's own controller reads and changes through the admin calls `run` makes.

The controller `run` uses is driven unchanged (`balancer.app.replay.ours`); this is the
Pulsar it talks to, answering as the simulator (`balancer.sim.model.SimModel`, which follows
Pulsar's `NamespaceService.splitAndOwnBundle` and `Namespaces.unloadNamespaceBundle`)
answers:

- a split replaces the bundle by its children at the given boundaries; with `unload` the
  children are unloaded and Pulsar's placement owns them anew: the replay cannot know where,
  so they keep the parent's owner until the recording shows the same child owned (then its
  recorded owner is taken, as `run` would have read it);
- an unload to a destination makes the destination the owner (the modular load manager's
  `bundleBrokerAffinityMap` honoured by the next lookup, as the simulator does);
- offloads: a topic's internal stats are one closed ledger of its recorded BookKeeper bytes
  and a current empty one, and an offload triggered is done at once (SUCCESS).

Placement rules are not in a recording: no isolation policy, failure domain or
anti-affinity group (documented in docs/operations.md#replay).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from balancer.core.broker_load import BrokerLoadReport
from balancer.core.bundles import BundleRange, NamespaceBundles, parse_position
from balancer.core.hashing import FULL_UPPER
from balancer.core.moves.model import IsolationPolicy
from balancer.core.replay.recording import RoundContext
from balancer.pulsar.errors import NotFoundError
from balancer.pulsar.models import (
    InternalStats,
    LedgerInfo,
    MessageId,
    OffloadState,
    OffloadStatus,
)
from balancer.pulsar.routing import routing_hint


def split_name(name: str) -> tuple[str, BundleRange]:
    """`tenant/ns/0x.._0x..` -> (`tenant/ns`, range)."""
    namespace, _, text = name.rpartition("/")
    return namespace, BundleRange.parse(text)


def recorded_layouts(reports: Iterable[BrokerLoadReport]) -> dict[str, NamespaceBundles]:
    """Each namespace's layout as the reports' owned bundles show it. A range no broker
    reports (unowned: nobody looked it up since its last unload) is one bundle."""
    bounds: dict[str, set[int]] = defaultdict(set)
    for report in reports:
        for name in report.bundles:
            namespace, rng = split_name(name)
            bounds[namespace].update((rng.lower, rng.upper))
    return {
        ns: NamespaceBundles(ns, tuple(sorted({0, FULL_UPPER, *points})))
        for ns, points in bounds.items()
    }


@dataclass
class OursLayout:
    """`ours`' layout of every cluster: what its own actions made of the recorded start."""

    layouts: dict[tuple[str, str], NamespaceBundles] = field(default_factory=dict)
    owners: dict[tuple[str, str], str] = field(default_factory=dict)  # (cluster, name) -> broker
    brokers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # (cluster, bundle name) whose owner Pulsar's placement chooses (unloaded children)
    unplaced: set[tuple[str, str]] = field(default_factory=set)
    # topic -> bytes in BookKeeper, as last recorded (offload's internal stats)
    bookkeeper_bytes: dict[str, int] = field(default_factory=dict)

    def observe(self, context: RoundContext) -> None:
        """A recorded round: new namespaces and brokers join as recorded; children Pulsar
        placed take their recorded owner. Nothing else of the recording overrides ours."""
        cluster = context.cluster
        self.brokers[cluster] = tuple(sorted({r.broker for r in context.reports}))
        for namespace, layout in recorded_layouts(context.reports).items():
            if (cluster, namespace) not in self.layouts:
                self.layouts[(cluster, namespace)] = layout
        for report in context.reports:
            for name in report.bundles:
                key = (cluster, name)
                if key not in self.owners or key in self.unplaced:
                    namespace, rng = split_name(name)
                    layout = self.layouts[(cluster, namespace)]
                    if layout.has(rng):
                        self.owners[key] = report.broker
                        self.unplaced.discard(key)

    def owned(self, cluster: str, broker: str) -> frozenset[str]:
        return frozenset(n for (c, n), b in self.owners.items() if c == cluster and b == broker)

    def cluster_of(self, namespace: str) -> str:
        hint = routing_hint()
        if hint is not None and (hint, namespace) in self.layouts:
            return hint
        for cluster, ns in self.layouts:
            if ns == namespace:
                return cluster
        raise NotFoundError(f"namespace {namespace} not in the recording", status=404)


class ReplayAdmin:
    """The admin ports `run`'s controller and move planner use, over an `OursLayout`."""

    def __init__(self, layout: OursLayout) -> None:
        self.layout = layout
        self._lock = threading.Lock()

    # -- AdminPort ---------------------------------------------------------------------------

    def get_bundles(self, namespace: str) -> NamespaceBundles:
        with self._lock:
            return self.layout.layouts[(self.layout.cluster_of(namespace), namespace)]

    def split_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        algorithm: str,
        boundaries: Sequence[int] = (),
        unload: bool = False,
    ) -> None:
        rng = bundle if isinstance(bundle, BundleRange) else BundleRange.parse(bundle)
        with self._lock:
            cluster = self.layout.cluster_of(namespace)
            key = (cluster, namespace)
            before = self.layout.layouts[key]
            points = list(boundaries) or [rng.lower + rng.width // 2]  # range_equally_divide
            after, children = before.split(rng, [parse_position(p) for p in points])
            self.layout.layouts[key] = after
            owner = self.layout.owners.pop((cluster, rng.key(namespace)), None)
            for child in children:
                name = (cluster, child.key(namespace))
                if owner is not None:
                    self.layout.owners[name] = owner
                if unload:
                    self.layout.unplaced.add(name)

    def internal_stats(self, topic: str) -> InternalStats:
        size = self.layout.bookkeeper_bytes.get(topic, 0)
        ledger = LedgerInfo(ledger_id=1, entries=max(1, size // 1024), size=size, offloaded=False)
        return InternalStats(
            number_of_entries=ledger.entries, total_size=size, current_ledger_entries=0,
            current_ledger_size=0, ledgers=(ledger, LedgerInfo(2, 0, 0, False)),
        )  # fmt: skip

    def trigger_offload(self, topic: str, message_id: MessageId) -> None:
        self.layout.bookkeeper_bytes[topic] = 0

    def offload_status(self, topic: str) -> OffloadStatus:
        return OffloadStatus(state=OffloadState.SUCCESS, last_error="")

    # -- MovePort ----------------------------------------------------------------------------

    def unload_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        cluster: str | None = None,
        destination_broker: str | None = None,
    ) -> None:
        rng = bundle if isinstance(bundle, BundleRange) else BundleRange.parse(bundle)
        with self._lock:
            where = cluster or self.layout.cluster_of(namespace)
            name = (where, rng.key(namespace))
            if destination_broker is not None:
                self.layout.owners[name] = destination_broker
                self.layout.unplaced.discard(name)
            else:
                self.layout.unplaced.add(name)

    def owned_bundles(self, cluster: str, broker: str) -> Mapping[str, object]:
        with self._lock:
            return {name: {} for name in self.layout.owned(cluster, broker)}

    def list_brokers(self, cluster: str) -> tuple[str, ...]:
        return self.layout.brokers.get(cluster, ())

    # -- PlacementReads: a recording has no placement rules -----------------------------------

    def isolation_policies(self, cluster: str) -> tuple[IsolationPolicy, ...]:
        return ()

    def failure_domains(self, cluster: str) -> Mapping[str, tuple[str, ...]]:
        return {}

    def anti_affinity_group(self, namespace: str, *, cluster: str | None = None) -> str | None:
        return None

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        return {}
