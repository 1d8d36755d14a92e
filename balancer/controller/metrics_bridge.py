"""Feed the controller's outcomes and breaker states to the Prometheus exporter.

`attach_metrics(controller, metrics)` registers a listener: each outcome's `ActionResult` is
counted as is when its kind of action can have it (`SPLIT_RESULTS` / `OFFLOAD_RESULTS` /
`MOVE_RESULTS`, a move with the sessions its unload reconnected), with
every split decision counted `decided` once (a recheck settles an earlier decision: not a new
one), a refused split algorithm and a refused unload counted from the outcome's typed flags,
and every cluster's
breaker gauge updated.
"""

from __future__ import annotations

from typing import Protocol

from balancer.controller.apply import Controller
from balancer.controller.breaker import BreakerState
from balancer.controller.outcome import Outcome
from balancer.core.decisions import DecisionKind
from balancer.core.moves.refusals import UnloadRefusal
from balancer.core.results import (
    DECIDED,
    MOVE_RESULTS,
    OFFLOAD_RESULTS,
    SPLIT_RESULTS,
    ActionResult,
    Decided,
)
from balancer.core.split import SplitAlgorithm


class MetricsSink(Protocol):
    """The part of `balancer.ops.exporter.BalancerMetrics` the controller feeds."""

    def record_split(
        self, cluster: str, result: ActionResult | Decided, reason: str, children: int = 0
    ) -> None: ...

    def record_split_algorithm_refused(self, cluster: str, algorithm: SplitAlgorithm) -> None: ...

    def record_offload(
        self, cluster: str, result: ActionResult, bytes_offloaded: int = 0
    ) -> None: ...

    def record_move(self, cluster: str, result: ActionResult, sessions_moved: int = 0) -> None: ...

    def record_move_refusal(self, cluster: str, refusal: UnloadRefusal) -> None: ...

    def set_breaker(self, cluster: str, open: bool) -> None: ...


def attach_metrics(controller: Controller, metrics: MetricsSink) -> None:
    def on_outcome(outcome: Outcome) -> None:
        if outcome.kind is DecisionKind.SPLIT:
            if not outcome.rechecked:
                metrics.record_split(outcome.cluster, DECIDED, outcome.reason)
            if outcome.result in SPLIT_RESULTS:
                metrics.record_split(
                    outcome.cluster, outcome.result, outcome.reason, outcome.children
                )
            if outcome.algorithm_refused is not None:
                metrics.record_split_algorithm_refused(outcome.cluster, outcome.algorithm_refused)
        elif outcome.kind is DecisionKind.MOVE:
            if outcome.result in MOVE_RESULTS:
                metrics.record_move(outcome.cluster, outcome.result, outcome.sessions_moved)
            if outcome.refusal is not None and not outcome.rechecked:
                metrics.record_move_refusal(outcome.cluster, outcome.refusal)
        elif outcome.result in OFFLOAD_RESULTS:
            metrics.record_offload(outcome.cluster, outcome.result, outcome.bytes_offloaded)
        # Every breaker: a decision on one cluster may have opened another cluster's.
        for cluster, status in controller.breaker_states().items():
            metrics.set_breaker(cluster, status.state is BreakerState.OPEN)

    controller.add_listener(on_outcome)
