"""Pulsar's own load managers as replayed policies: per window, its auto split
(`pulsar_splits`) and then its shedder with its placement (`pulsar_shedders`), on the
policy's own layout.

- `pulsar-modular-threshold`: `ModularLoadManagerImpl` with `ThresholdShedder` (its default
  strategy since 2.10), `BundleSplitterTask`, `LeastLongTermMessageRate` placement;
- `pulsar-modular-uniform`: the same with `UniformLoadShedder`;
- `pulsar-extensible-transfer`: `ExtensibleLoadManagerImpl` with `TransferShedder`
  (transfers straight to the least loaded broker) and `DefaultNamespaceBundleSplitStrategyImpl`
  run by each broker's `SplitScheduler` on the bundles it owns.

Cadence: shedding every `loadBalancerSheddingIntervalMinutes` (1) and the split check every
`loadBalancerSplitIntervalMinutes` (1, extensible; the modular leader checks at each load
data update, modelled as once a minute): a window of 60 s is one cycle of each. A window of
another length runs round(window_s / 60) cycles (at least one) on the same window loads, the
layout changed between them.

What a recording does not carry is not modelled: namespace isolation policies and
anti-affinity groups (every broker of the round is allowed), and the leader's view between
load reports (each cycle reads the window's loads: no report lag, kinder to Pulsar).

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from balancer.core.limits import BundleLimits
from balancer.core.load import BundleLoad, roll_up
from balancer.core.replay.layout import BrokerView, ReplayLayout, bundle_keys
from balancer.core.replay.policy import sessions_in
from balancer.core.replay.pulsar_shedders import (
    ModularPlacement,
    ThresholdShedder,
    TransferShedder,
    UniformLoadShedder,
    Unload,
)
from balancer.core.replay.pulsar_splits import (
    DEFAULT_ALGORITHM,
    ExtensibleSplitStrategy,
    ModularSplitStrategy,
    SplitChoice,
    pulsar_boundaries,
)
from balancer.core.replay.result import (
    POLICY_PULSAR_THRESHOLD,
    POLICY_PULSAR_TRANSFER,
    POLICY_PULSAR_UNIFORM,
    ActionKind,
    ReplayAction,
)
from balancer.core.replay.window import ReplayWindow
from balancer.core.split import SplitAlgorithm

CYCLE_S = 60  # loadBalancerSheddingIntervalMinutes, loadBalancerSplitIntervalMinutes
LoadManager = Literal["modular", "extensible"]
Shedder = ThresholdShedder | UniformLoadShedder | TransferShedder


@dataclass(frozen=True, slots=True)
class ReplayBundle:
    """A bundle of the layout as a shedder sees it (`pulsar_shedders.ShedBundle`)."""

    name: str
    namespace: str
    rates: BundleLoad


class LayoutView:
    """One cluster of a policy's layout in one window, as Pulsar's leader sees it
    (`pulsar_shedders.ClusterView`): the brokers with a load report in the round, their
    loads corrected for the policy's layout, every bundle with its window load."""

    def __init__(
        self,
        layout: ReplayLayout,
        cluster: str,
        brokers: Mapping[str, BrokerView],
        window: ReplayWindow,
    ) -> None:
        self.layout = layout
        self.cluster = cluster
        self.brokers = brokers
        c = layout.clusters[cluster]
        self.bundles: list[ReplayBundle] = []
        window.roll_up_all((cluster, ns, bundles) for ns, bundles in c.namespaces.items())
        for namespace in sorted(c.namespaces):
            bundles = c.namespaces[namespace]
            keys = bundle_keys(namespace, bundles.boundaries)
            loads = window.namespace_loads(cluster, namespace, bundles)
            for bundle, key, load in zip(bundles.bundles, keys, loads, strict=True):
                rates = load or roll_up(
                    cluster=cluster,
                    namespace=namespace,
                    bundle=bundle,
                    window_end_ms=window.window_end_ms,
                    topics=(),
                )
                self.bundles.append(ReplayBundle(key, namespace, rates))
        # A view lives for one decision: the layout does not change under it.
        self.by_owner: dict[str, list[ReplayBundle]] = {}
        for b in self.bundles:
            owner = c.owners.get(b.name)
            if owner is not None:
                self.by_owner.setdefault(owner, []).append(b)

    def broker_ids(self) -> list[str]:
        return sorted(self.brokers)

    def all_bundles(self) -> list[ReplayBundle]:
        return self.bundles

    def owner_of(self, bundle: str) -> str | None:
        return self.layout.owner(self.cluster, bundle)

    def bundles_of(self, broker: str) -> list[ReplayBundle]:
        return self.by_owner.get(broker, [])

    def loads(self) -> dict[str, float]:
        return {b: v.load_ratio for b, v in sorted(self.brokers.items())}

    def broker_rates(self) -> dict[str, BrokerView]:
        return dict(sorted(self.brokers.items()))

    def allowed_brokers(self, namespace: str) -> set[str]:
        return set(self.brokers)  # no isolation policy in a recording

    def has_policy(self, namespace: str) -> bool:
        return False


@dataclass
class PulsarPolicy:
    """One of Pulsar's load managers replayed (see the module doc); state per cluster."""

    name: str
    description: str
    load_manager: LoadManager
    new_shedder: Callable[[], Shedder]
    window_s: int = CYCLE_S
    limits: BundleLimits = field(default_factory=BundleLimits)
    algorithm: SplitAlgorithm = DEFAULT_ALGORITHM
    seed: int = 1
    shedders: dict[str, Shedder] = field(default_factory=dict)
    modular_splits: dict[str, ModularSplitStrategy] = field(default_factory=dict)
    extensible_splits: dict[tuple[str, str], ExtensibleSplitStrategy] = field(default_factory=dict)
    placements: dict[str, ModularPlacement] = field(default_factory=dict)

    @property
    def cycles_per_window(self) -> int:
        return max(1, round(self.window_s / CYCLE_S))

    def step(self, window: ReplayWindow, layout: ReplayLayout) -> list[ReplayAction]:
        actions: list[ReplayAction] = []
        n = self.cycles_per_window
        for i in range(n):
            now_s = window.window_end_ms / 1000 - (n - 1 - i) * CYCLE_S
            for cluster in sorted(window.contexts):
                if cluster in layout.clusters:
                    actions += self._split(cluster, window, layout)
                    actions += self._shed(cluster, window, layout, now_s)
        return actions

    # ---- split ----

    def _split(
        self, cluster: str, window: ReplayWindow, layout: ReplayLayout
    ) -> list[ReplayAction]:
        loads = [b for b in layout.bundle_loads(window) if b.cluster == cluster]
        loads.sort(key=lambda b: (-b.msg_rate, b.namespace, b.bundle))
        c = layout.clusters[cluster]
        counts = {ns: bundles.num_bundles for ns, bundles in c.namespaces.items()}
        # A window's roll-ups carry no topic objects: those of a bundle being split are
        # built for it alone.
        boundaries = pulsar_boundaries(
            self.algorithm,
            topics_of=lambda b: window.topic_loads_in(b.cluster, b.namespace, b.bundle),
        )
        choices: list[SplitChoice] = []
        if self.load_manager == "modular":
            strategy = self.modular_splits.setdefault(
                cluster, ModularSplitStrategy(limits=self.limits)
            )
            choices = strategy.cycle(loads, counts, boundaries)
        else:
            # Each broker's SplitScheduler checks the bundles it owns, its own counts.
            by_owner: dict[str, list[BundleLoad]] = {}
            for b in loads:
                owner = c.owners.get(b.bundle.key(b.namespace))
                if owner is not None:
                    by_owner.setdefault(owner, []).append(b)
            for broker in sorted(by_owner):
                strategy_x = self.extensible_splits.setdefault(
                    (cluster, broker), ExtensibleSplitStrategy(limits=self.limits)
                )
                choices += strategy_x.cycle(by_owner[broker], counts, boundaries)
        actions: list[ReplayAction] = []
        for choice in choices:
            actions += self._apply_split(cluster, choice, window, layout)
        return actions

    def _apply_split(
        self, cluster: str, choice: SplitChoice, window: ReplayWindow, layout: ReplayLayout
    ) -> list[ReplayAction]:
        key = choice.key
        owner = layout.owner(cluster, key)
        children = layout.apply_split(cluster, key, choice.boundaries)
        unload = self.load_manager == "modular"  # loadBalancerAutoUnloadSplitBundlesEnabled
        at_ms = window.window_end_ms
        split = ReplayAction(
            at_ms=at_ms,
            cluster=cluster,
            kind=ActionKind.SPLIT,
            subject=key,
            source_broker=owner,
            children=tuple(str(c) for c in children),
            # Unloaded children reconnect every client of the parent; under the extensible
            # load manager they stay owned by the parent's broker.
            sessions_moved=choice.load.session_count if unload else 0,
            reason=f"{choice.reason.value} over its limit"
            + (", children unloaded" if unload else ""),
        )
        actions = [split]
        if not unload:
            return actions
        # Each child is looked up again and placed by the leader (selectBrokerForAssignment),
        # one after the other on the layout as the previous placement left it.
        placement = self.placements.setdefault(cluster, ModularPlacement(self.seed))
        for child in children:
            child_key = child.key(choice.load.namespace)
            view = self._view(cluster, window, layout)
            bundle = next(b for b in view.all_bundles() if b.name == child_key)
            destination = placement.select(view, bundle)
            if destination is None or destination == owner:
                continue
            layout.apply_move(cluster, child_key, destination)
            actions.append(
                ReplayAction(
                    at_ms=at_ms,
                    cluster=cluster,
                    kind=ActionKind.MOVE,
                    subject=child_key,
                    source_broker=owner,
                    destination_broker=destination,
                    sessions_moved=0,  # counted with the split
                    reason="split child placed by LeastLongTermMessageRate",
                )
            )
        return actions

    # ---- shed ----

    def _shed(
        self, cluster: str, window: ReplayWindow, layout: ReplayLayout, now_s: float
    ) -> list[ReplayAction]:
        shedder = self.shedders.get(cluster)
        if shedder is None:
            shedder = self.shedders[cluster] = self.new_shedder()
        view = self._view(cluster, window, layout)
        if not view.brokers:
            return []
        if isinstance(shedder, TransferShedder):
            # doCleanup drops a broker's load data when it leaves (brokerLoadDataStore).
            for gone in set(shedder.ema) - set(view.brokers):
                shedder.ema.pop(gone, None)
                shedder.throughput_ema.pop(gone, None)
        unloads: list[Unload] = shedder.cycle(view, now_s)
        actions: list[ReplayAction] = []
        loads = view.loads()
        for u in unloads:
            if not layout.has_bundle(cluster, u.bundle) or u.destination not in view.brokers:
                continue
            layout.apply_move(cluster, u.bundle, u.destination)
            actions.append(
                ReplayAction(
                    at_ms=window.window_end_ms,
                    cluster=cluster,
                    kind=ActionKind.MOVE,
                    subject=u.bundle,
                    source_broker=u.source,
                    destination_broker=u.destination,
                    sessions_moved=sessions_in(window, cluster, u.bundle),
                    reason=f"{type(shedder).__name__}: {u.source} at {loads[u.source]:.2f}",
                )
            )
        return actions

    def _view(self, cluster: str, window: ReplayWindow, layout: ReplayLayout) -> LayoutView:
        # Brokers of the layout (the engine's `follow`) with a load report in the round.
        members = set(layout.brokers(cluster))
        brokers = {
            b: v
            for (c, b), v in layout.broker_loads(window).items()
            if c == cluster and b in members
        }
        return LayoutView(layout, cluster, brokers, window)


def pulsar_policies(window_s: int = CYCLE_S, seed: int = 1) -> list[PulsarPolicy]:
    """The three Pulsar policies a replay runs by default, with Pulsar's defaults."""
    split = f"auto split {DEFAULT_ALGORITHM.value}"
    return [
        PulsarPolicy(
            POLICY_PULSAR_THRESHOLD,
            f"modular: ThresholdShedder + LeastLongTermMessageRate, {split} (children unloaded)",
            "modular",
            lambda: ThresholdShedder(seed),
            window_s=window_s,
            seed=seed,
        ),
        PulsarPolicy(
            POLICY_PULSAR_UNIFORM,
            f"modular: UniformLoadShedder + LeastLongTermMessageRate, {split} (children unloaded)",
            "modular",
            lambda: UniformLoadShedder(seed),
            window_s=window_s,
            seed=seed,
        ),
        PulsarPolicy(
            POLICY_PULSAR_TRANSFER,
            f"extensible: TransferShedder, {split} after 4 checks over",
            "extensible",
            TransferShedder,
            window_s=window_s,
            seed=seed,
        ),
    ]
