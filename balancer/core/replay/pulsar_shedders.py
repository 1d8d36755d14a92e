"""Models of Pulsar's load shedders with their default settings, and of the modular load
manager's placement of an unloaded bundle: for the replay's Pulsar policies
(`balancer.core.replay.pulsar_policies`) and the broker benchmarks (`bench.broker_balance`,
`bench.broker_rollout`, `bench.broker_drain`), which see a cluster through `ClusterView`.

Written from the contract (`../shared/reference/pulsar-contract.md`, "Moving bundles
between brokers") and checked against apache/pulsar's source (classes named per rule).
Each model is called once per shedding cycle (`loadBalancerSheddingIntervalMinutes` = 1)
and returns its unloads, (bundle, source, destination); the caller applies them at once.

What the leader sees: the brokers' load reports as of the cycle (a broker writes its report
within 5 s of a > 10 % change: `loadBalancerReportUpdateMinIntervalMillis`,
`loadBalancerReportUpdateThresholdPercentage`). A bundle's rates in the view stand for its
long-term rates too (the benchmarks' loads are steady, and `TimeAverageMessageData` keeps
1000 samples; the replay gives the window's rates: kinder to Pulsar on a rising load).
Every shedder's history starts at the brokers' loads of its first cycle (generous to Pulsar:
no warm-up from an empty history).

Purely computational, with no side effects (the placement's random tie-break is seeded).
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

MB = 1024.0 * 1024.0

GRACE_PERIOD_S = 30 * 60.0  # loadBalancerSheddingGracePeriodMinutes
OVERLOAD_RATIO = 0.85  # loadBalancerBrokerOverloadedThresholdPercentage
HISTORY = 0.9  # loadBalancerHistoryResourcePercentage


class Rates(Protocol):
    """A load's msg rate and throughput (a broker's or a bundle's)."""

    @property
    def msg_rate(self) -> float: ...  # msg/s, in + out

    @property
    def throughput_bytes(self) -> float: ...  # bytes/s, in + out


class ShedBundle(Protocol):
    """A bundle as a shedder sees it in its owner's load report."""

    @property
    def name(self) -> str: ...  # tenant/ns/0x.._0x..

    @property
    def namespace(self) -> str: ...  # tenant/ns

    @property
    def rates(self) -> Rates: ...


class ClusterView(Protocol):
    """The leader's view of one cluster in a cycle: its brokers' load reports and who owns
    which bundle (`bench.broker_cluster.ClusterState`, the replay's `LayoutView`)."""

    def broker_ids(self) -> Sequence[str]: ...

    def all_bundles(self) -> Sequence[ShedBundle]: ...

    def owner_of(self, bundle: str) -> str | None: ...

    def bundles_of(self, broker: str) -> Sequence[ShedBundle]: ...

    def loads(self) -> Mapping[str, float]: ...  # broker -> weighted max resource usage

    def broker_rates(self) -> Mapping[str, Rates]: ...

    def allowed_brokers(self, namespace: str) -> set[str]: ...

    def has_policy(self, namespace: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Unload:
    bundle: str  # bundle name tenant/ns/0x.._0x..
    source: str
    destination: str


class ModularPlacement:
    """`ModularLoadManagerImpl.selectBroker` with the defaults: namespace isolation
    (`LoadManagerShared.applyNamespacePolicies`), max topics (50,000, never reached here),
    "distribute bundles evenly" (`LoadManagerShared.removeMostServicingBrokersForNamespace`,
    `loadBalancerDistributeBundlesEvenlyEnabled` true), then `LeastLongTermMessageRate`:
    the least long-term msg rate, a broker over 85 % scoring infinity, ties broken at random;
    if the chosen broker is over 85 % the choice is made again over all allowed brokers.

    `ModularLoadManagerImpl.doLoadShedding` calls `selectBroker` for each bundle of the cycle
    without preallocating it, so every bundle of one cycle sees the same loads."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def select(self, state: ClusterView, bundle: ShedBundle) -> str | None:
        allowed = state.allowed_brokers(bundle.namespace)
        candidates = sorted(allowed)
        if not candidates:
            return None
        # removeMostServicingBrokersForNamespace: keep the brokers with the fewest bundles of
        # the bundle's namespace.
        counts = {b: 0 for b in candidates}
        for other in state.all_bundles():
            owner = state.owner_of(other.name)
            if other.namespace == bundle.namespace and owner in counts:
                counts[owner] += 1
        least = min(counts.values())
        evenly = [b for b in candidates if counts[b] == least]
        choice = self._least_long_term_msg_rate(state, evenly)
        loads = state.loads()
        if choice is None or loads[choice] > OVERLOAD_RATIO:
            choice = self._least_long_term_msg_rate(state, candidates)
        return choice

    def _least_long_term_msg_rate(self, state: ClusterView, candidates: list[str]) -> str | None:
        if not candidates:
            return None
        loads = state.loads()
        rates = state.broker_rates()
        scores = {
            b: math.inf if loads[b] > OVERLOAD_RATIO else rates[b].msg_rate for b in candidates
        }
        best = min(scores.values())
        # All overloaded: LeastLongTermMessageRate picks at random among all candidates.
        tied = [b for b in candidates if scores[b] == best]
        return self.rng.choice(tied)


@dataclass
class _Modular(ABC):
    """`ModularLoadManagerImpl.doLoadShedding` around a strategy: bundles unloaded within the
    grace period are skipped (`recentlyUnloadedBundles`); a bundle whose namespace policy
    allows only its owner is not unloaded (`shouldNamespacePoliciesUnload`); a destination
    equal to the owner is skipped; the unload carries the destination."""

    seed: int
    placement: ModularPlacement = field(init=False)
    recently_unloaded: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.placement = ModularPlacement(self.seed)

    def cycle(self, state: ClusterView, now_s: float) -> list[Unload]:
        if len(state.broker_ids()) <= 1:
            return []
        self.recently_unloaded = {
            b: t for b, t in self.recently_unloaded.items() if now_s - t < GRACE_PERIOD_S
        }
        selected = self.find_bundles(state, now_s)
        by_name = {b.name: b for b in state.all_bundles()}
        unloads = []
        for name, broker in selected:
            bundle = by_name[name]
            if state.allowed_brokers(bundle.namespace) - {broker} == set():
                continue
            destination = self.placement.select(state, bundle)
            if destination is None or destination == broker:
                continue
            unloads.append(Unload(name, broker, destination))
            self.recently_unloaded[name] = now_s
        return unloads

    @abstractmethod
    def find_bundles(self, state: ClusterView, now_s: float) -> list[tuple[str, str]]:
        """The strategy's (bundle, owner) pairs to unload this cycle (ThresholdShedder or
        UniformLoadShedder below)."""


@dataclass
class ThresholdShedder(_Modular):
    """`ThresholdShedder.findBundlesForUnloading` (the default strategy since 2.10): each
    broker's usage is an EMA with history 0.9 updated once per cycle; a broker over
    avg + 10 % (`loadBalancerBrokerThresholdShedderPercentage`) unloads at least
    (usage - avg - 0.10 + 0.05) of its throughput, largest bundles (short-term throughput)
    first, at least one; nothing when that is under 10 MB/s
    (`loadBalancerBundleUnloadMinThroughputThreshold`) or the broker has one bundle."""

    threshold: float = 0.10
    min_throughput_bytes: float = 10 * MB
    avg_usage: dict[str, float] = field(default_factory=dict)

    def find_bundles(self, state: ClusterView, now_s: float) -> list[tuple[str, str]]:
        loads = state.loads()
        for broker, load in loads.items():
            # History starts at the t = 0 load (see the module doc).
            previous = self.avg_usage.get(broker, load)
            self.avg_usage[broker] = previous * HISTORY + (1 - HISTORY) * load
        avg = sum(self.avg_usage[b] for b in loads) / len(loads)
        if avg == 0:
            return []
        rates = state.broker_rates()
        selected: list[tuple[str, str]] = []
        for broker in sorted(loads):
            usage = self.avg_usage[broker]
            if avg - self.threshold < usage < avg + self.threshold:
                continue
            share = usage - avg - self.threshold + 0.05
            to_offload = rates[broker].throughput_bytes * share
            if to_offload < self.min_throughput_bytes:
                continue
            owned = [b for b in state.bundles_of(broker) if b.name not in self.recently_unloaded]
            if len(state.bundles_of(broker)) <= 1:
                continue
            marked, one_selected = 0.0, False
            for bundle in sorted(owned, key=lambda b: -b.rates.throughput_bytes):
                if marked < to_offload or not one_selected:
                    selected.append((bundle.name, broker))
                    marked += bundle.rates.throughput_bytes
                    one_selected = True
        return selected


@dataclass
class UniformLoadShedder(_Modular):
    """`UniformLoadShedder.findBundlesForUnloading`: between the brokers with the highest
    and the lowest msg rate, a gap over 50 % (`loadBalancerMsgRateDifferenceShedderThreshold`)
    unloads bundles of the highest worth 20 % of the gap (`maxUnloadPercentage`), largest
    first, each at most the remainder + 1000; else a throughput ratio over 4
    (`loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold`) does the same on
    throughput. Nothing under 1000 msg/s (`minUnloadMessage`) or 1 MB/s
    (`minUnloadMessageThroughput`), nor from a broker with one bundle."""

    def find_bundles(self, state: ClusterView, now_s: float) -> list[tuple[str, str]]:
        rates = state.broker_rates()
        order = sorted(rates)
        max_rate_broker = max(order, key=lambda b: rates[b].msg_rate)
        max_tp_broker = max(order, key=lambda b: rates[b].throughput_bytes)
        min_rate = min(rates[b].msg_rate for b in order)
        min_tp = min(rates[b].throughput_bytes for b in order)
        max_rate = rates[max_rate_broker].msg_rate
        max_tp = rates[max_tp_broker].throughput_bytes
        min_rate = 1.0 if abs(min_rate) <= 1e-6 else min_rate
        min_tp = 1.0 if abs(min_tp) <= 1e-6 else min_tp
        rate_exceeded = (max_rate - min_rate) * 100 / min_rate > 50
        tp_exceeded = max_tp / min_tp > 4
        if not (rate_exceeded or tp_exceeded):
            return []
        if rate_exceeded:
            broker, required, minimum = max_rate_broker, int((max_rate - min_rate) * 0.2), 1000

            def value(b: ShedBundle) -> float:
                return b.rates.msg_rate
        else:
            broker, required, minimum = max_tp_broker, int((max_tp - min_tp) * 0.2), int(MB)

            def value(b: ShedBundle) -> float:
                return b.rates.throughput_bytes

        owned = state.bundles_of(broker)
        if len(owned) <= 1 or required < minimum:
            return []
        selected = []
        remaining = float(required)
        candidates = [b for b in owned if b.name not in self.recently_unloaded and value(b) > 0]
        for bundle in sorted(candidates, key=lambda b: -value(b)):
            if value(bundle) <= remaining + 1000:
                remaining -= value(bundle)
                selected.append((bundle.name, broker))
        return selected


@dataclass
class TransferShedder:
    """The extensible load manager's `TransferShedder.findBundlesForUnloading` (PIP-192):

    - a broker's load is `BrokerLoadData.getWeightedMaxEMA`, history 0.9 per load report
      (the reporter ticks every 5 s, NV: 12 updates a minute);
    - the condition (std of loads > 0.25 `loadBalancerBrokerLoadTargetStd`, or the least
      loaded broker under avg x 0.125 or under the top broker's throughput x 0.125, or the
      top broker over 85 % and over avg + 0.25) must hold on more than 3 consecutive cycles
      (`loadBalancerSheddingConditionHitCountThreshold`); after a decision the count restarts;
    - a cycle is skipped while a broker unloaded from or to is within 180 s of its transfer
      (`loadBalanceSheddingDelayInSeconds`, the report's timestamp 5 s behind);
    - pairs the most with the least loaded broker, at most 3 pairs a cycle
      (`loadBalancerMaxNumberOfBrokerSheddingPerCycle`), offloading (max - min) / 2 of load
      as throughput, from the top-k bundles of the report (k = 10 % of the broker's bundles,
      at least 1: `TopKBundles`), keeping at least one, skipping bundles moved within 30 min
      and bundles of a namespace under an isolation policy
      (`loadBalancerSheddingBundlesWithPoliciesEnabled` false), and destinations the bundle's
      policies do not allow; transfer to the least loaded broker (`loadBalancerTransferEnabled`).
    Not modelled: the swap of bundles from the min to the max broker when one bundle is
    larger than the target (it only adds moves)."""

    target_std: float = 0.25
    hit_count_threshold: int = 3
    cooldown_s: float = 180.0
    report_lag_s: float = 5.0
    max_brokers_per_cycle: int = 3
    ticks_per_cycle: int = 12
    ema: dict[str, float] = field(default_factory=dict)
    throughput_ema: dict[str, float] = field(default_factory=dict)
    hit_count: int = 0
    recently_unloaded: dict[str, float] = field(default_factory=dict)
    recently_unloaded_brokers: dict[str, float] = field(default_factory=dict)

    def _update_ema(self, state: ClusterView) -> None:
        loads = state.loads()
        rates = state.broker_rates()
        keep = HISTORY**self.ticks_per_cycle
        for broker, load in loads.items():
            tp = rates[broker].throughput_bytes
            self.ema[broker] = self.ema.get(broker, load) * keep + (1 - keep) * load
            self.throughput_ema[broker] = (
                self.throughput_ema.get(broker, tp) * keep + (1 - keep) * tp
            )

    def cycle(self, state: ClusterView, now_s: float) -> list[Unload]:
        self._update_ema(state)
        self.recently_unloaded = {
            b: t for b, t in self.recently_unloaded.items() if now_s - t < GRACE_PERIOD_S
        }
        updated_at = now_s - self.report_lag_s
        for broker, t in list(self.recently_unloaded_brokers.items()):
            if updated_at - t < self.cooldown_s:
                return []  # CoolDown: the whole cycle is skipped
            del self.recently_unloaded_brokers[broker]
        brokers = sorted(self.ema, key=lambda b: (self.ema[b], b))
        n = len(brokers)
        total = sum(self.ema.values())
        sq = sum(v * v for v in self.ema.values())
        avg = total / n

        def std() -> float:
            return math.sqrt(abs(sq / n - avg * avg))

        def under(broker: str, top: str) -> bool:
            mult = min(0.5, max(0.0, self.target_std / 2))
            return (
                self.ema[broker] < avg * mult
                or self.throughput_ema[broker] < self.throughput_ema[top] * mult
            )

        def over(broker: str) -> bool:
            return self.ema[broker] > OVERLOAD_RATIO and self.ema[broker] > avg + self.target_std

        if std() > self.target_std or under(brokers[0], brokers[-1]) or over(brokers[-1]):
            self.hit_count += 1
        else:
            self.hit_count = 0
        if self.hit_count <= self.hit_count_threshold:
            return []
        rates = state.broker_rates()
        unloads: list[Unload] = []
        lo, hi, pairs = 0, n - 1, 0
        while pairs < self.max_brokers_per_cycle and lo < hi:
            if not (
                std() > self.target_std or under(brokers[lo], brokers[hi]) or over(brokers[hi])
            ):
                break
            src, dst = brokers[hi], brokers[lo]
            hi -= 1
            max_load, min_load = self.ema[src], self.ema[dst]
            src_tp = rates[src].throughput_bytes
            if max_load <= 0 or src_tp <= 0:
                continue
            offload_tp = src_tp * ((max_load - min_load) / 2) / max_load
            owned = sorted(state.bundles_of(src), key=lambda b: -b.rates.throughput_bytes)
            top = owned[: max(1, int(len(owned) * 10 / 100))]
            if len(top) <= 1:
                continue  # "Sole namespace bundle is overloading the broker"
            remaining, marked = len(top), 0.0
            for bundle in top:
                if bundle.name in self.recently_unloaded or state.has_policy(bundle.namespace):
                    continue
                if dst not in state.allowed_brokers(bundle.namespace):
                    continue
                if remaining <= 1:
                    break
                if marked + bundle.rates.throughput_bytes > offload_tp:
                    break
                unloads.append(Unload(bundle.name, src, dst))
                marked += bundle.rates.throughput_bytes
                remaining -= 1
            if marked > 0:
                offload = marked * max_load / src_tp
                sq -= max_load**2 + min_load**2
                sq += max(0.0, max_load - offload) ** 2 + (min_load + offload) ** 2
                lo += 1
                pairs += 1
        if unloads:
            self.hit_count = 0
            for u in unloads:
                self.recently_unloaded[u.bundle] = now_s
                self.recently_unloaded_brokers[u.source] = now_s
                self.recently_unloaded_brokers[u.destination] = now_s
        return unloads
