"""The end-of-run summary: bundles before and after, what was applied, what was processed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from balancer.app.config import BalancerConfig
from balancer.app.pulsar_wiring import peer_group_from_config
from balancer.app.run_summary import (
    BrokerLoadAtEnd,
    MoveApplied,
    OffloadTriggered,
    RunSummary,
    SplitApplied,
    UnknownAction,
)
from balancer.app.wiring import BalancerApp
from balancer.controller.outcome import MOVED, Outcome, target_of
from balancer.core.broker_load import BrokerLoad
from balancer.core.bundles import format_position
from balancer.core.decisions import OffloadDecision, SplitDecision
from balancer.core.moves.model import MoveDecision
from balancer.core.results import ActionResult
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import NotFoundError, PulsarAdminError

log = logging.getLogger(__name__)


CENSUS_DEADLINE_S = 20.0  # a cluster that has not answered by then is left out of the census


def census(admin: PulsarPeerGroup, *, deadline_s: float = CENSUS_DEADLINE_S) -> dict[str, int]:
    """Bundles per namespace across the peer group (`tenant/ns` -> count), each namespace as
    its home cluster knows it.

    Every cluster lists every namespace of a tenant (the configuration store is shared), and
    a cluster that is not a namespace's home answers GET bundles from a copy frozen at its
    first read (`NamespaceBundleFactory.copyToLocalPolicies`): only the home's answer is
    true. The home is the first cluster of the group (in the config's order) among the
    namespace's replication clusters (`GET .../replication`, the same from every cluster);
    a namespace with none in the group is not ours and is left out. All clusters are asked
    at once; a cluster that does not answer within `deadline_s` is skipped (and logged)
    with the namespaces it is home to, so the census never holds up the run's start or end.
    """
    return start_census(admin, deadline_s=deadline_s)()


def home_cluster(replication_clusters: Iterable[str], group: Sequence[str]) -> str | None:
    """The namespace's home: the first cluster of `group` it replicates to, None if none."""
    replicated = set(replication_clusters)
    return next((c for c in group if c in replicated), None)


def start_census(
    admin: PulsarPeerGroup, *, deadline_s: float = CENSUS_DEADLINE_S
) -> Callable[[], dict[str, int]]:
    """Start `census` in the background; the function returned waits for it (at most
    until `deadline_s` after the start) and gives the counts."""
    found: dict[str, dict[str, int]] = {}
    group = list(admin.clusters)
    homes: dict[str, str | None] = {}  # namespace -> home, shared by the clusters' threads
    homes_lock = threading.Lock()

    def home_of(namespace: str, cluster: str) -> str | None:
        with homes_lock:
            if namespace in homes:
                return homes[namespace]
        home = home_cluster(admin.get_replication_clusters(namespace, via=cluster), group)
        if home is None:
            log.info("census: %s replicates to no cluster of the group: left out", namespace)
        with homes_lock:
            homes[namespace] = home
        return home

    def count(cluster: str) -> None:
        # Each cluster counts the namespaces it is home to; any cluster can name the home.
        counts: dict[str, int] = {}
        try:
            for tenant in admin.list_tenants(via=cluster):
                for namespace in admin.list_namespaces(tenant, via=cluster):
                    try:
                        if namespace not in counts and home_of(namespace, cluster) == cluster:
                            layout = admin.get_bundles(namespace, cluster=cluster)
                            counts[namespace] = layout.num_bundles
                    except NotFoundError:  # deleted since it was listed: nothing to count
                        continue
        except (PulsarAdminError, ValueError) as exc:
            log.warning("census of cluster %s incomplete: %s", cluster, type(exc).__name__)
        found[cluster] = counts

    threads = [
        threading.Thread(target=count, args=(c,), name=f"census-{c}", daemon=True) for c in group
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + deadline_s

    def result() -> dict[str, int]:
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        merged: dict[str, int] = {}
        for cluster in group:
            if cluster not in found:
                log.warning(
                    "census of cluster %s skipped: no answer in %.0f s", cluster, deadline_s
                )
                continue
            for namespace, bundles in found[cluster].items():
                merged.setdefault(namespace, bundles)
        return dict(sorted(merged.items()))

    return result


def summarize(
    app: BalancerApp,
    *,
    before: dict[str, int],
    config: BalancerConfig,
    started: float,
    error: str | None,
) -> RunSummary:
    with app.live.lock:
        outcomes = list(app.live.summary_outcomes)
        consumed = app.live.events_consumed
        rejected = dict(app.live.events_rejected)
        late = app.live.events_late
        batches = app.live.batches
        lone = sorted(app.live.lone_hot_seen.values(), key=lambda h: (h.cluster, h.topic))
        brokers = brokers_of(app.live.broker_loads)
    splits, offloads, unknown = actions_of(outcomes)
    with peer_group_from_config(config) as admin:
        after = census(admin)
    return RunSummary(
        bundles_before=before,
        bundles_after=after,
        splits=splits,
        offloads=offloads,
        events_processed=consumed - sum(rejected.values()),
        events_rejected=sum(rejected.values()),
        events_rejected_by_reason=rejected,
        events_late=late,
        batches=batches,
        mode=config.controller.mode,
        duration_s=time.monotonic() - started,
        stream_error=error,
        unknown=unknown,
        lone_hot_topics=[h.to_dict() for h in lone],
        moves=moves_of(outcomes),
        brokers=brokers,
    )


Actions = tuple[list[SplitApplied], list[OffloadTriggered], list[UnknownAction]]


def actions_of(outcomes: list[Outcome]) -> Actions:
    """Applied splits, triggered offloads, and actions still `unknown`, from the outcomes."""
    splits: list[SplitApplied] = []
    offloads: list[OffloadTriggered] = []
    settled = {o.decision_id for o in outcomes if o.rechecked}
    unknown: list[UnknownAction] = [
        {"kind": o.kind.value, "cluster": o.cluster, "target": _target(o),
         "decision_id": o.decision_id, "detail": o.detail}
        for o in outcomes
        if o.result is ActionResult.UNKNOWN and o.decision_id not in settled
    ]  # fmt: skip
    for outcome in outcomes:
        # A split that timed out and was then read back as applied is listed once: from the
        # recheck's outcome, which carries the decision too.
        if outcome.result is not ActionResult.APPLIED or outcome.decision is None:
            continue
        d = outcome.decision
        if isinstance(d, SplitDecision):
            splits.append(
                {
                    "cluster": d.cluster,
                    "namespace": d.namespace,
                    "bundle": str(d.bundle),
                    "boundaries": [format_position(b) for b in d.boundaries],
                    "children": len(d.boundaries) + 1,
                    "reason": outcome.reason,
                    "algorithm": d.algorithm.value,
                    "detail": outcome.detail,
                }
            )
        elif isinstance(d, OffloadDecision):  # moves: `moves_of`
            offloads.append(
                {
                    "cluster": d.cluster,
                    "topic": d.topic,
                    "storage_size_bytes": d.storage_size_bytes,
                    "threshold_bytes": d.threshold_bytes,
                    "bytes_offloaded": outcome.bytes_offloaded,
                    "detail": outcome.detail,
                }
            )
    return splits, offloads, unknown


def moves_of(outcomes: list[Outcome]) -> list[MoveApplied]:
    """The moves that unloaded their bundle: applied, or landed on another broker than the
    destination (the modular load manager can lose it, apache/pulsar#24884)."""
    moves: list[MoveApplied] = []
    for outcome in outcomes:
        d = outcome.decision
        if outcome.result not in MOVED or not isinstance(d, MoveDecision):
            continue
        moves.append(
            {
                "cluster": d.cluster,
                "namespace": d.namespace,
                "bundle": str(d.bundle),
                "source": d.source,
                "destination": d.destination,
                "reason": d.reason.value,
                "result": outcome.result.value,
                "sessions": outcome.sessions_moved,
                "detail": outcome.detail,
            }
        )
    return moves


def brokers_of(loads: Mapping[str, Sequence[BrokerLoad]]) -> list[BrokerLoadAtEnd]:
    """Each broker's load in the newest window the handler planned moves for."""
    return [
        {
            "cluster": cluster,
            "broker": load.broker,
            "load_ratio": load.load_ratio,
            "source": load.source.value,
        }
        for cluster, brokers in sorted(loads.items())
        for load in brokers
    ]


def _target(outcome: Outcome) -> str:
    d = outcome.decision
    return outcome.namespace if d is None else target_of(d)
