"""What the collector polls: each cluster's brokers, re-read from Pulsar every round.

broker-stats/topics lists only the bundles a broker owns, so every broker of a cluster is
polled. A cluster configured with its brokers polls exactly those. Any other cluster's
brokers are listed (`GET /admin/v2/brokers/{cluster}`) at the start of every round, so a
broker added later is polled within one interval and a cluster that was down when the
process started is polled broker by broker as soon as it answers. Until a cluster has ever
been listed, it is polled through its admin URL: one broker behind it, so its topics only,
a PARTIAL read (`BrokerDirectory.partial`); a failed listing keeps the brokers listed last.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

ADMIN_LABEL = "admin"  # the `broker` label of a target polled through the admin URL


@dataclass(frozen=True, slots=True)
class Target:
    """One broker-stats endpoint: a cluster, and a broker URL the operator configured, or a
    listed broker's id (`broker_id`, reached where the admin client finds it:
    `balancer.pulsar.broker_addresses`); neither: the cluster's admin URL."""

    cluster: str
    broker_url: str | None = None
    broker_id: str | None = None

    @property
    def broker(self) -> str | None:
        """`host:port` of the broker (its id), as the event's `broker` field."""
        if self.broker_id is not None:
            return self.broker_id
        if self.broker_url is None:
            return None
        return urlsplit(self.broker_url).netloc or self.broker_url

    @property
    def label(self) -> str:
        """The broker as metrics and readiness name it (`admin` for the admin URL)."""
        return self.broker or ADMIN_LABEL

    def __str__(self) -> str:
        return f"{self.cluster}@{self.broker_url or self.broker_id or 'admin'}"


def targets_for(clusters: Mapping[str, Sequence[str]]) -> list[Target]:
    """Targets from cluster -> broker URLs (an empty list: poll the cluster's admin URL).
    What to poll first (`balancer.collector.admin.polling_plan` builds on it)."""
    out: list[Target] = []
    for cluster, brokers in clusters.items():
        if brokers:
            out.extend(Target(cluster, url.rstrip("/")) for url in brokers)
        else:
            out.append(Target(cluster))
    return out


# Lists one cluster's broker ids (`host:port`, as `GET /admin/v2/brokers/{cluster}` does);
# raises when the cluster cannot be asked.
BrokerLister = Callable[[], Sequence[str]]


def listed_brokers(cluster: str, lister: BrokerLister) -> tuple[Target, ...]:
    """The targets one listing gives: each broker once, in order (empty: no broker is
    registered). Raises as `lister` does. The collector's rounds and `plan` both use it.

    A broker id is a name, not an address (`advertisedAddress:webServicePort`): no URL is
    made of it here; the admin client finds where the broker answers."""
    return tuple(
        Target(cluster, broker_id=broker) for broker in sorted({broker_id(b) for b in lister()})
    )


def broker_id(listed: str) -> str:
    """A listed broker's id, `host:port` (a leading http(s):// and a trailing / dropped, as
    Pulsar's `maybeRedirectToBroker` drops them)."""
    return listed.strip().removeprefix("http://").removeprefix("https://").rstrip("/")


class BrokerDirectory:
    """Each cluster's targets; clusters with a lister are re-listed by `refresh`.

    Thread-safe: a cluster's round refreshes its own entry while others read theirs.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        listers: Mapping[str, BrokerLister] | None = None,
    ) -> None:
        if not targets:
            raise ValueError("the collector needs at least one cluster to poll")
        self._lock = threading.Lock()
        self._targets: dict[str, tuple[Target, ...]] = {}
        for target in targets:
            self._targets[target.cluster] = (*self._targets.get(target.cluster, ()), target)
        self._listers = dict(listers or {})
        unknown = set(self._listers) - set(self._targets)
        if unknown:
            raise ValueError(f"broker listers for unknown clusters: {sorted(unknown)}")
        self._listed_once: set[str] = set()
        self.list_failures: dict[str, int] = dict.fromkeys(self._listers, 0)

    @property
    def clusters(self) -> tuple[str, ...]:
        return tuple(self._targets)

    def targets(self, cluster: str | None = None) -> tuple[Target, ...]:
        """The targets of `cluster` (default: of every cluster), as last listed."""
        with self._lock:
            if cluster is not None:
                return self._targets.get(cluster, ())
            return tuple(t for ts in self._targets.values() for t in ts)

    def partial(self, cluster: str) -> bool:
        """True while `cluster` is polled through its admin URL because its brokers were never
        listed: the broker behind that URL reports the bundles it owns, not the cluster's."""
        with self._lock:
            return cluster in self._listers and cluster not in self._listed_once

    def refresh(self, cluster: str) -> None:
        """List `cluster`'s brokers again (no-op for a cluster given its brokers).

        A failed or empty listing keeps the targets as they were: the brokers listed last,
        or the admin URL before any listing succeeded.
        """
        lister = self._listers.get(cluster)
        if lister is None:
            return
        try:
            new = listed_brokers(cluster, lister)
        except Exception as exc:  # the cluster is down or refuses: poll what we know
            with self._lock:
                self.list_failures[cluster] += 1
                known = self._targets[cluster]
                never = cluster not in self._listed_once
            log.warning(
                "collector: brokers of %s not listed (%s); polling %s%s",
                cluster,
                type(exc).__name__,
                ", ".join(t.label for t in known),
                " (a partial read: one broker's topics only, until a listing succeeds)"
                if never
                else "",
            )
            return
        if not new:
            return  # no active broker registered: nothing better than what we poll now
        with self._lock:
            old = self._targets[cluster]
            self._targets[cluster] = new
            first = cluster not in self._listed_once
            self._listed_once.add(cluster)
        if new != old:
            added = sorted(t.label for t in set(new) - set(old))
            removed = sorted(t.label for t in set(old) - set(new))
            log.log(
                logging.INFO if first else logging.WARNING,
                "collector: brokers of %s now %s (added %s, removed %s)",
                cluster,
                ", ".join(t.label for t in new),
                ", ".join(added) or "none",
                ", ".join(removed) or "none",
            )
