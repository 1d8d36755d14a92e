"""Series of the move path beside the exporter's core families (issue 41): why Pulsar refused
an unload with destination, and the clusters whose placement rules cannot be read as Java
reads them (no moves there)."""

from __future__ import annotations

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

    def register_cluster(self, cluster: str) -> None:
        """Every series at 0, so increase() sees the first refusal."""
        for refusal in UnloadRefusal:
            self._refusals.labels(cluster=cluster, refusal=refusal.value)
        self._unreadable.labels(cluster=cluster).set(0)

    def record_refusal(self, cluster: str, refusal: UnloadRefusal) -> None:
        """Pulsar refused an unload with destination (a closed label set)."""
        refusal = UnloadRefusal(refusal)  # ValueError outside the closed set
        self._refusals.labels(cluster=cluster, refusal=refusal.value).inc()

    def set_rules_unreadable(self, cluster: str, unreadable: bool) -> None:
        self._unreadable.labels(cluster=cluster).set(1 if unreadable else 0)
