"""Whether each broker's load report (or load metrics) answers, per broker and reason.

Every failed read is counted (`on_failure(cluster, broker, reason)`, the collector's
`pulsar_balancer_load_report_failures_total`); the log says only what changes: one line when
a broker stops answering or starts failing for another reason, one when it answers again,
so a broker that never gives a report logs once, not every round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from balancer.collector.failures import classify

log = logging.getLogger(__name__)


def load_failure_reason(exc: BaseException) -> str:
    """The reason label: `none` when the broker answers the routes with no load to give
    (404/405, an empty or unreadable body, no loadBalancing metrics), else the poll failure
    class (unreachable, timeout, unauthorized, invalid_answer, server_error, other)."""
    from balancer.pulsar.broker_admin import LoadReportUnavailableError

    if isinstance(exc, LoadReportUnavailableError):
        return "none"
    return classify(exc).value


class LoadReportHealth:
    def __init__(self, on_failure: Callable[[str, str, str], None] | None = None) -> None:
        self._on_failure = on_failure
        self._state: dict[tuple[str, str], str] = {}  # (cluster, broker) -> failing reason
        self._lock = threading.Lock()

    def answered(self, cluster: str, broker: str) -> None:
        with self._lock:
            was = self._state.pop((cluster, broker), None)
        if was is not None:
            log.info("load: %s of %s gives its load again (was failing: %s)", broker, cluster, was)

    def failed(self, cluster: str, broker: str, exc: BaseException) -> str:
        """Count the failure; log it when the broker's state changes. Returns the reason."""
        reason = load_failure_reason(exc)
        if self._on_failure is not None:
            self._on_failure(cluster, broker, reason)
        with self._lock:
            was = self._state.get((cluster, broker))
            self._state[(cluster, broker)] = reason
        if was != reason:
            log.warning(
                "load: %s of %s gives no load report or load metrics (%s: %s, %s); its "
                "cluster gets no moves while its brokers cannot all be measured (logged "
                "again when this changes)",
                broker,
                cluster,
                reason,
                type(exc).__name__,
                str(exc)[:200],
            )
        return reason

    def failing(self) -> dict[tuple[str, str], str]:
        with self._lock:
            return dict(self._state)
