"""Where each broker of a cluster is reached: its registered web service URL (issue 41).

A broker id is `advertisedAddress:webServicePort` (the TLS port only when no plain port is
configured: `PulsarService.getBrokerId`, `ModularLoadManagerImpl.start`). It is a NAME, not
an address: with an https admin URL and brokers that keep 8080 open, `https://<id>` speaks
TLS to the plain port. Pulsar publishes each broker's `webServiceUrl` and
`webServiceUrlTls` (LocalBrokerData / BrokerLookupData under `/loadbalance/brokers/<id>`)
but no admin route lists them; it USES them when it sends a request for one broker there:
`GET /admin/v2/brokers/{cluster}/{id}/ownedNamespaces` asked of any broker answers 307 to
the broker's webServiceUrlTls when the request came over https (or it has no plain URL),
else to its webServiceUrl (`PulsarWebResource.maybeRedirectToBroker`). So a broker's URL is
where that redirect leads: what Pulsar's own admin client reaches. Releases before
apache/pulsar PR #21894 (Pulsar 3.2) redirect
to `<request scheme>://<id>` (`validateBrokerName`): such a broker, when that fails, is
reported unreachable with the URL tried, never replaced by a guess.

The book keeps each broker's URL once found (the id stays while the broker keeps its
address), the URLs an operator configured (`clusters[].brokers`), and each broker's last
state, so a change is logged once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from enum import StrEnum

from balancer.pulsar.errors import PulsarAdminError

log = logging.getLogger("balancer.pulsar")


class ReachedBy(StrEnum):
    """How a broker's URL was found."""

    REGISTERED = "registered"  # Pulsar's redirect to the broker's webServiceUrl(Tls)
    ADMIN_URL = "admin_url"  # the admin URL answered as this broker (and names it)
    CONFIGURED = "configured"  # clusters[].brokers


class Unreachable(StrEnum):
    """Why no URL of a broker could be found (`BrokerUnreachableError.why`)."""

    NOT_A_BROKER = "not_a_broker"  # no active broker has this id (404)
    NO_ANSWER = "no_answer"  # the admin URL or the broker's URL does not answer
    BEHIND_ADMIN_URL = "behind_admin_url"  # answered through a shared admin URL, URL unnamed
    REFUSED = "refused"  # the redirect could not be followed (https to http, a loop)
    ERROR = "error"  # another answer (401/403, 5xx)


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    cluster: str
    broker: str  # the id, host:port
    url: str  # scheme://host:port, no path
    reached_by: ReachedBy


class BrokerUnreachableError(PulsarAdminError):
    """No URL of this broker answered: named (`broker`), with why (`why`) and the cause."""

    def __init__(
        self, message: str, *, broker: str, why: Unreachable, cause: PulsarAdminError | None
    ) -> None:
        super().__init__(
            message,
            status=cause.status if cause is not None else None,
            reason=cause.reason if cause is not None else "",
            method=cause.method if cause is not None else "GET",
            url=cause.url if cause is not None else "",
            cluster=cause.cluster if cause is not None else None,
        )
        self.broker = broker
        self.why = why


class BrokerAddressBook:
    """Each (cluster, broker id)'s URL, configured or found; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], BrokerAddress] = {}
        self._state: dict[tuple[str, str], str] = {}  # last logged: url or why

    def get(self, cluster: str, broker: str) -> BrokerAddress | None:
        with self._lock:
            return self._known.get((cluster, broker))

    def configure(self, cluster: str, broker: str, url: str) -> None:
        """A URL the operator gave for this broker: used as is, never looked up."""
        address = BrokerAddress(cluster, broker, url.rstrip("/"), ReachedBy.CONFIGURED)
        with self._lock:
            self._known[(cluster, broker)] = address
            changed = self._state.get((cluster, broker)) != address.url
            self._state[(cluster, broker)] = address.url
        if changed:
            log.info("broker %s of %s is reached at %s (configured)", broker, cluster, address.url)

    def found(self, address: BrokerAddress) -> None:
        key = (address.cluster, address.broker)
        with self._lock:
            if key in self._known and self._known[key].reached_by is ReachedBy.CONFIGURED:
                return
            self._known[key] = address
            changed = self._state.get(key) != address.url
            self._state[key] = address.url
        if changed:
            log.info(
                "broker %s of %s is reached at %s (%s)",
                address.broker,
                address.cluster,
                address.url,
                address.reached_by.value,
            )

    def failed(self, cluster: str, error: BrokerUnreachableError) -> None:
        key = (cluster, error.broker)
        with self._lock:
            changed = self._state.get(key) != error.why.value
            self._state[key] = error.why.value
        if changed:
            log.warning("%s", error)

    def forget(self, cluster: str, broker: str) -> None:
        """Look the broker up again next time (its URL stopped answering)."""
        with self._lock:
            known = self._known.get((cluster, broker))
            if known is not None and known.reached_by is not ReachedBy.CONFIGURED:
                del self._known[(cluster, broker)]

    def addresses(self) -> tuple[BrokerAddress, ...]:
        with self._lock:
            return tuple(self._known.values())
