"""The collector's side of the Pulsar admin client: what a round fetches, and from whom.

`admin_fetch` turns `PulsarPeerGroup.broker_topic_stats` into the collector's `Fetch`;
`polling_plan` decides what `run`, `collect` and `plan` poll: a cluster's configured
brokers, or its brokers listed again every round (`balancer.collector.targets`);
`listed_targets` is the same plan listed once, for `plan`'s one-off reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from balancer.collector.service import Fetch, Fetched
from balancer.collector.targets import (
    BrokerLister,
    Target,
    broker_url,
    listed_brokers,
    targets_for,
)

if TYPE_CHECKING:
    from balancer.pulsar.models import BrokerTopicStats


class BrokerStatsSource(Protocol):
    """What the collector asks: `balancer.pulsar.PulsarPeerGroup` is one."""

    def broker_topic_stats(
        self, cluster: str, broker_url: str | None = None
    ) -> BrokerTopicStats: ...


def admin_fetch(peer_group: BrokerStatsSource) -> Fetch:
    """A `Fetch` over `balancer.pulsar.PulsarPeerGroup.broker_topic_stats`."""

    def fetch(target: Target) -> Fetched:
        stats = peer_group.broker_topic_stats(target.cluster, target.broker_url)
        return Fetched(
            samples=[(entry.topic, entry.stats) for entry in stats],
            skipped_namespaces=stats.skipped_namespaces,
            no_data=stats.no_data,
            rejected=stats.rejected,
        )

    return fetch


class BrokerListSource(Protocol):
    """What lists a cluster's brokers: `balancer.pulsar.PulsarPeerGroup` is one."""

    def list_brokers(self, cluster: str) -> Sequence[str]: ...


class ClusterToPoll(Protocol):
    """A cluster as the config gives it (`balancer.app.config.ClusterConfig` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def admin_url(self) -> str: ...

    @property
    def brokers(self) -> Sequence[str]: ...


@dataclass(frozen=True, slots=True)
class PolledCluster:
    """A `ClusterToPoll` given on the command line."""

    name: str
    admin_url: str
    brokers: Sequence[str] = ()


def polling_plan(
    clusters: Iterable[ClusterToPoll], admin: BrokerListSource
) -> tuple[list[Target], dict[str, BrokerLister]]:
    """What to poll first, and who lists the brokers of clusters not given theirs.

    A cluster with configured brokers polls exactly those; any other starts on its admin
    URL and is listed (`GET /admin/v2/brokers/{cluster}`) at the start of every round.
    """
    clusters = list(clusters)
    targets = targets_for({cluster.name: cluster.brokers for cluster in clusters})
    listers = {
        cluster.name: _lister(admin, cluster.name, cluster.admin_url)
        for cluster in clusters
        if not cluster.brokers
    }
    return targets, listers


def _lister(admin: BrokerListSource, cluster: str, admin_url: str) -> BrokerLister:
    return lambda: [broker_url(address, admin_url) for address in admin.list_brokers(cluster)]


def listed_targets(
    clusters: Iterable[ClusterToPoll], admin: BrokerListSource
) -> tuple[list[Target], dict[str, Exception]]:
    """`polling_plan` with each cluster's brokers listed once, now: every broker to poll,
    and the clusters whose brokers could not be listed (cluster -> error), left out.

    No admin-URL fallback here: a one-off read of one broker would be a partial picture of
    the cluster presented as whole.
    """
    targets, listers = polling_plan(clusters, admin)
    errors: dict[str, Exception] = {}
    out: list[Target] = []
    for target in targets:
        lister = listers.get(target.cluster)
        if lister is None:
            out.append(target)
            continue
        try:
            listed = listed_brokers(target.cluster, lister)
        except Exception as exc:  # the cluster is down or refuses: name it, plan the rest
            errors[target.cluster] = exc
            continue
        # No broker registered: the admin URL is all there is to ask, as the collector does.
        out.extend(listed or [target])
    return out, errors
