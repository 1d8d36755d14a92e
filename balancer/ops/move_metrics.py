"""Series of the move path beside the exporter's core families (issue 41): why Pulsar refused
an unload with destination, and the clusters whose placement rules cannot be read as Java
reads them (no moves there); and (issue 43) the progress of each drain, and whether a roll
is in progress."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from balancer.core.moves.refusals import UnloadRefusal
from balancer.ops.collector_metrics import PREFIX


class MovePathMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._refusals = Counter(
            f"{PREFIX}_move_refusals",
            "Unloads with destination Pulsar refused, by why (refusal: no_leader, "
            "leader_url_missing, bundle_not_found, namespace_gone, not_owned, "
            "inactive_destination, other_412).",
            ["cluster", "refusal"],
            registry=registry,
        )
        self._unreadable = Gauge(
            f"{PREFIX}_placement_rules_unreadable",
            "1 while the cluster's namespace isolation policies hold a pattern Python cannot "
            "read as Java does (e.g. \\Q...\\E, \\p{...}): no move in that cluster.",
            ["cluster"],
            registry=registry,
        )

        self._bundles_left = Gauge(
            f"{PREFIX}_drain_bundles_left",
            "Bundles a broker marked draining still owns that are to leave it (system "
            "namespaces left out), as the last move plan read them; no series once unmarked.",
            ["cluster", "broker"],
            registry=registry,
        )
        self._drains_started = Counter(
            f"{PREFIX}_drain_started",
            "Drains started: a broker seen marked draining for the first time.",
            ["cluster"],
            registry=registry,
        )
        self._drains_finished = Counter(
            f"{PREFIX}_drain_finished",
            "Drains finished: a broker marked draining seen owning no bundle to move.",
            ["cluster"],
            registry=registry,
        )
        self._roll = Gauge(
            f"{PREFIX}_roll_in_progress",
            "1 while the cluster's rollout record is open (`roll start` until `roll finish` "
            "or every broker of its order seen back), as the drain marks were last read.",
            ["cluster"],
            registry=registry,
        )
        self._draining: dict[str, set[str]] = {}  # cluster -> brokers with a series

    def register_cluster(self, cluster: str) -> None:
        """Every series at 0, so increase() sees the first refusal."""
        for refusal in UnloadRefusal:
            self._refusals.labels(cluster=cluster, refusal=refusal.value)
        self._unreadable.labels(cluster=cluster).set(0)
        self._drains_started.labels(cluster=cluster)
        self._drains_finished.labels(cluster=cluster)
        self._roll.labels(cluster=cluster).set(0)

    def set_drains(
        self, cluster: str, bundles_left: Mapping[str, int], started: int, finished: int
    ) -> None:
        """One cycle's drain progress: bundles left per draining broker (the series of
        brokers no longer draining removed), and the drains started and finished since."""
        for broker in self._draining.get(cluster, set()) - set(bundles_left):
            self._bundles_left.remove(cluster, broker)
        for broker, left in bundles_left.items():
            self._bundles_left.labels(cluster=cluster, broker=broker).set(left)
        self._draining[cluster] = set(bundles_left)
        if started:
            self._drains_started.labels(cluster=cluster).inc(started)
        if finished:
            self._drains_finished.labels(cluster=cluster).inc(finished)

    def set_roll_in_progress(self, cluster: str, rolling: bool) -> None:
        self._roll.labels(cluster=cluster).set(1 if rolling else 0)

    def record_refusal(self, cluster: str, refusal: UnloadRefusal) -> None:
        """Pulsar refused an unload with destination (a closed label set)."""
        refusal = UnloadRefusal(refusal)  # ValueError outside the closed set
        self._refusals.labels(cluster=cluster, refusal=refusal.value).inc()

    def set_rules_unreadable(self, cluster: str, unreadable: bool) -> None:
        self._unreadable.labels(cluster=cluster).set(1 if unreadable else 0)
