"""Feed the controller's outcomes and breaker states to the Prometheus exporter.

`attach_metrics(controller, metrics)` registers a listener: each outcome is counted with the
exporter's closed result sets (results the exporter does not know, such as `denied` or
`rate_limited`, stay in `controller.stats` only) and every cluster's breaker gauge is updated.
"""

from __future__ import annotations

from typing import Protocol

from balancer.controller.apply import Controller
from balancer.controller.breaker import BreakerState
from balancer.controller.outcome import Outcome
from balancer.controller.stats import ActionResult
from balancer.core.decisions import DecisionKind

# Every controller result has a metric label; only the names of a few differ.
SPLIT_RESULTS: dict[ActionResult, str] = {
    r: r.value
    for r in ActionResult
    if r
    not in (ActionResult.ALREADY_RUNNING, ActionResult.NOTHING_TO_OFFLOAD, ActionResult.STARTED)
}
# An offload's 204 is `started`; `applied` only once Pulsar's status says SUCCESS.
OFFLOAD_RESULTS: dict[ActionResult, str] = {
    r: r.value for r in ActionResult if r is not ActionResult.STALE
}


class MetricsSink(Protocol):
    """The part of `balancer.ops.exporter.BalancerMetrics` the controller feeds."""

    def record_split(self, cluster: str, result: str, reason: str, children: int = 0) -> None: ...

    def record_split_algorithm_refused(self, cluster: str, algorithm: str) -> None: ...

    def record_offload(self, cluster: str, result: str, bytes_offloaded: int = 0) -> None: ...

    def set_breaker(self, cluster: str, open: bool) -> None: ...


def attach_metrics(controller: Controller, metrics: MetricsSink) -> None:
    def on_outcome(outcome: Outcome) -> None:
        if outcome.kind is DecisionKind.SPLIT:
            if not outcome.rechecked:  # a recheck settles an earlier decision: not a new one
                metrics.record_split(outcome.cluster, "decided", outcome.reason)
            result = SPLIT_RESULTS.get(outcome.result)
            if result is not None:
                metrics.record_split(outcome.cluster, result, outcome.reason, outcome.children)
            refused = outcome.pulsar.get("algorithm_refused")
            if refused:
                metrics.record_split_algorithm_refused(outcome.cluster, refused)
        else:
            result = OFFLOAD_RESULTS.get(outcome.result)
            if result is not None:
                metrics.record_offload(outcome.cluster, result, outcome.bytes_offloaded)
        # Every breaker: a decision on one cluster may have opened another cluster's.
        for cluster, status in controller.breaker_states().items():
            metrics.set_breaker(cluster, status.state is BreakerState.OPEN)

    controller.add_listener(on_outcome)
