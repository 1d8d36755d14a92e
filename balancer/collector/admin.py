"""The collector's side of the Pulsar admin client: what a round fetches, and from whom.

`fetch_broker_stats` is what a round asks each broker (the collector's and `plan`'s);
`admin_fetch` turns it into the collector's `Fetch`;
`polling_plan` decides what `run`, `collect` and `plan` poll: a cluster's configured
brokers, or its brokers listed again every round (`balancer.collector.targets`);
`listed_targets` is the same plan listed once, for `plan`'s one-off reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from balancer.collector.load_health import LoadReportHealth
from balancer.collector.ports import Fetch, Fetched
from balancer.collector.targets import (
    BrokerLister,
    Target,
    broker_id,
    listed_brokers,
    targets_for,
)
from balancer.pulsar.errors import UnavailableError

if TYPE_CHECKING:
    from balancer.core.broker_load import BrokerLoadReport
    from balancer.pulsar.models import BrokerTopicStats

log = logging.getLogger(__name__)


class BrokerStatsSource(Protocol):
    """What the collector asks: `balancer.pulsar.PulsarPeerGroup` is one."""

    def broker_topic_stats(
        self, cluster: str, broker_url: str | None = None
    ) -> BrokerTopicStats: ...

    def load_report(self, cluster: str, broker: str) -> BrokerLoadReport: ...

    def broker_url(self, cluster: str, broker: str) -> str: ...

    def forget_broker_url(self, cluster: str, broker: str) -> None: ...


def target_url(source: BrokerStatsSource, target: Target) -> str | None:
    """Where a target is asked (None: the cluster's admin URL): its configured URL, or the
    URL the admin client found for the listed broker (`balancer.pulsar.broker_addresses`;
    raises BrokerUnreachableError when there is none). The collector's rounds, `plan` and
    the controller's broker calls all reach a broker through that one client."""
    if target.broker_url is not None:
        return target.broker_url
    if target.broker_id is not None:
        return source.broker_url(target.cluster, target.broker_id)
    return None


def fetch_broker_stats(source: BrokerStatsSource, target: Target) -> BrokerTopicStats:
    """One target's `GET /admin/v2/broker-stats/topics`, asked at `target_url`: what every
    round of `run`, `collect` and `plan` asks a broker."""
    try:
        return source.broker_topic_stats(target.cluster, target_url(source, target))
    except UnavailableError:
        if target.broker_url is None and target.broker_id is not None:
            # Its URL stopped answering (the broker restarted elsewhere?): look it up
            # again next round rather than keep asking a stale address.
            source.forget_broker_url(target.cluster, target.broker_id)
        raise


def admin_fetch(
    peer_group: BrokerStatsSource,
    *,
    load_reports: bool = False,
    health: LoadReportHealth | None = None,
) -> Fetch:
    """A `Fetch` over `balancer.pulsar.PulsarPeerGroup.broker_topic_stats`; with
    `load_reports`, each broker's load report is read in the same round (its load metrics
    under the extensible load manager). A broker that gives neither still gives its stats;
    each failure is counted per broker and reason, and logged when that changes
    (`health`)."""
    health = health or LoadReportHealth()

    def fetch(target: Target) -> Fetched:
        stats = fetch_broker_stats(peer_group, target)
        report = None
        if load_reports and target.broker is not None:
            try:
                report = peer_group.load_report(target.cluster, target.broker)
            except Exception as exc:  # any answer but a report: counted, logged on change
                health.failed(target.cluster, target.broker, exc)
            else:
                health.answered(target.cluster, target.broker)
        return Fetched(
            samples=[(entry.topic, entry.stats) for entry in stats],
            skipped_namespaces=stats.skipped_namespaces,
            no_data=stats.no_data,
            rejected=stats.rejected,
            broker_load=report,
            owned_bundles=frozenset(f"{e.namespace}/{e.bundle}" for e in stats),
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


class BrokerUrlSource(BrokerListSource, Protocol):
    """What takes the broker URLs an operator configured: `PulsarPeerGroup` is one."""

    def configure_broker_url(self, cluster: str, url: str) -> str: ...


def configure_brokers(clusters: Iterable[ClusterToPoll], admin: BrokerUrlSource) -> list[str]:
    """Reach each configured broker at its URL (every caller: `run`, `collect`, `plan`), and
    check each URL names a broker: its host:port must be a broker id of the cluster as
    `GET /admin/v2/brokers/{cluster}` lists them, or every unload naming it as destination
    would answer 409 and its events would carry a broker no rule knows. One line per URL
    that does not; a cluster that cannot be listed now is logged and checked no further
    (it may be down at start: its brokers are polled as configured)."""
    problems: list[str] = []
    for cluster in clusters:
        if not cluster.brokers:
            continue
        ids: dict[str, str] = {}
        for url in cluster.brokers:
            try:
                ids[admin.configure_broker_url(cluster.name, url)] = url
            except ValueError as exc:  # no host:port in it (a default port): names no id
                problems.append(f"clusters.{cluster.name}.brokers: {url}: {exc}")
        try:
            listed = {broker_id(b) for b in admin.list_brokers(cluster.name)}
        except Exception as exc:  # the cluster is down or refuses: say so, poll as given
            log.warning(
                "brokers of %s not listed (%s): its configured broker URLs are not checked",
                cluster.name,
                type(exc).__name__,
            )
            continue
        for bid, url in ids.items():
            if bid not in listed:
                problems.append(
                    f"clusters.{cluster.name}.brokers: {url}: {bid} is not a broker id of "
                    f"{cluster.name} (its brokers: {', '.join(sorted(listed)) or 'none'}); "
                    "give each broker's URL with the host:port it is listed under, or leave "
                    "brokers out to reach each broker at its registered URL"
                )
    return problems


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
        cluster.name: _lister(admin, cluster.name) for cluster in clusters if not cluster.brokers
    }
    return targets, listers


def _lister(admin: BrokerListSource, cluster: str) -> BrokerLister:
    return lambda: [broker_id(address) for address in admin.list_brokers(cluster)]


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
