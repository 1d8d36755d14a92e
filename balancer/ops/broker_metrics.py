"""Broker load and the move decision's verdict per cluster, as gauges.

Each cluster's newest broker loads and move plan are kept here and turned into series at
every scrape (as the bundle snapshot's are), so a broker gone from its cluster leaves no
stale series.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from balancer.core.broker_load import BrokerLoad
from balancer.core.moves.model import MovePlan
from balancer.ops.collector_metrics import PREFIX


class BrokerLoadFamilies(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loads: dict[str, tuple[BrokerLoad, ...]] = {}
        self._plans: dict[str, MovePlan] = {}

    def set_cluster(self, cluster: str, loads: Sequence[BrokerLoad], plan: MovePlan | None) -> None:
        """The cluster's broker loads and move plan of its newest window."""
        with self._lock:
            self._loads[cluster] = tuple(loads)
            if plan is None:
                self._plans.pop(cluster, None)
            else:
                self._plans[cluster] = plan

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        ratio, spread, balanced, blocked = self._families()
        with self._lock:
            loads = dict(self._loads)
            plans = dict(self._plans)
        for cluster, brokers in sorted(loads.items()):
            for load in brokers:
                ratio.add_metric([cluster, load.broker, load.source.value], load.load_ratio)
            if brokers:
                values = [load.load_ratio for load in brokers]
                spread.add_metric([cluster], max(values) - min(values))
        for cluster, plan in sorted(plans.items()):
            balanced.add_metric([cluster], 1.0 if plan.balanced_before else 0.0)
            for item in plan.blocked:
                blocked.add_metric([cluster, item.broker, item.reason.value], 1.0)
        return ratio, spread, balanced, blocked

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}_broker_load_ratio",
                "A broker's load in its newest window: the largest of its resource usages over "
                "their limits, weighted (1.0 is full); source = load_report (modular), "
                "metrics (extensible: broker-stats/metrics) or bundles (neither: its bundles "
                "against moves.broker_capacity).",
                labels=["cluster", "broker", "source"],
            ),
            GaugeMetricFamily(
                f"{PREFIX}_broker_load_spread_ratio",
                "Most loaded minus least loaded broker of the cluster (load ratio).",
                labels=["cluster"],
            ),
            GaugeMetricFamily(
                f"{PREFIX}_cluster_brokers_balanced",
                "1 when every broker of the cluster was within the move target in the newest "
                "window (before that window's moves), else 0.",
                labels=["cluster"],
            ),
            GaugeMetricFamily(
                f"{PREFIX}_broker_move_blocked",
                "1 for a broker over its target that the newest move plan could not relieve, "
                "labelled with why (no_destination, grace_period, budget, too_small, "
                "single_bundle, range_in_flight).",
                labels=["cluster", "broker", "reason"],
            ),
        )
