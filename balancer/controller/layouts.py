"""Current bundle layouts per (cluster, namespace), read from the admin API and kept fresh.

Implements the stream's `LayoutProvider`: the controller stores every layout it reads
(before and after each split), so the stream maps topics to the new children at once; other
layouts are re-read after `refresh_s`. When Pulsar cannot be asked (breaker open, error),
the last known layout is used, or Pulsar's initial layout when none is known yet.
"""

from __future__ import annotations

import logging
import threading

from balancer.controller.breaker import Breakers
from balancer.controller.clock import Clock
from balancer.controller.ports import AdminPort
from balancer.core.bundles import NamespaceBundles
from balancer.pulsar.errors import PulsarAdminError, ServerError, UnavailableError
from balancer.pulsar.routing import routed_to

log = logging.getLogger(__name__)


class LayoutCache:
    def __init__(
        self,
        admin: AdminPort,
        *,
        clock: Clock,
        breakers: Breakers | None = None,
        refresh_s: float = 60.0,
        default_bundles: int = 4,
    ) -> None:
        self._admin = admin
        self._clock = clock
        self._breakers = breakers
        self._refresh_s = refresh_s
        self._default_bundles = default_bundles
        self._layouts: dict[tuple[str, str], tuple[NamespaceBundles, float]] = {}
        self._lock = threading.Lock()

    def put(self, cluster: str, layout: NamespaceBundles) -> None:
        with self._lock:
            self._layouts[(cluster, layout.namespace)] = (layout, self._clock.monotonic())

    def get(self, cluster: str, namespace: str) -> NamespaceBundles | None:
        """The last known layout, however old (no call to Pulsar)."""
        with self._lock:
            found = self._layouts.get((cluster, namespace))
        return None if found is None else found[0]

    def bundle_counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return {key: layout.num_bundles for key, (layout, _) in self._layouts.items()}

    def layout(self, cluster: str, namespace: str) -> NamespaceBundles:
        """`LayoutProvider.layout`: cached while fresh, else read from Pulsar."""
        with self._lock:
            found = self._layouts.get((cluster, namespace))
        if found is not None and self._clock.monotonic() - found[1] < self._refresh_s:
            return found[0]
        breaker = self._breakers.for_cluster(cluster) if self._breakers is not None else None
        if breaker is None or breaker.allow():
            try:
                with routed_to(cluster):  # the cluster the stats came from knows the layout
                    layout = self._admin.get_bundles(namespace)
            except PulsarAdminError as exc:
                if self._breakers is not None and breaker is not None:
                    if isinstance(exc, ServerError | UnavailableError):
                        self._breakers.for_cluster(exc.cluster or cluster).record_failure()
                    else:
                        breaker.record_success()
                log.warning("cannot read the bundles of %s on %s: %s", namespace, cluster, exc)
            else:
                if breaker is not None:
                    breaker.record_success()
                self.put(cluster, layout)
                return layout
        if found is not None:
            return found[0]
        return NamespaceBundles.initial(namespace, self._default_bundles)

    def known_topics(self, cluster: str, namespace: str) -> int | None:
        """`LayoutProvider.known_topics`: unknown here (completeness uses reported topics)."""
        return None
