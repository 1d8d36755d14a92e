"""The run's batch handler feeds the broker gauges (load ratio, spread, balanced, blocked)
from the move planner's newest window: the alert PulsarBalancerBrokerOverloadedNoMove reads
them."""

from __future__ import annotations

from unittest.mock import MagicMock

from prometheus_client import CollectorRegistry

from balancer.app.app_handler import AppHandler, LiveState
from balancer.controller.drain_progress import DrainProgress
from balancer.controller.move_planning import ClusterLoads
from balancer.core.broker_load import BrokerLoad, LoadSource
from balancer.core.limits import BundleLimits
from balancer.core.moves.model import BlockedBroker, BlockReason, MovePlan
from balancer.ops.exporter import BalancerMetrics
from tests.reports import batch_report


def test_the_handler_sets_the_broker_gauges_of_each_planned_cluster() -> None:
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, ns: BundleLimits(), process_metrics=False)
    loads = (
        BrokerLoad("east", "10.0.0.1:8080", 60_000, 0.97, LoadSource.LOAD_REPORT),
        BrokerLoad("east", "10.0.0.3:8080", 60_000, 0.01, LoadSource.BUNDLES),
    )
    plan = MovePlan(
        cluster="east",
        window_end_ms=60_000,
        moves=(),
        loads_before={"10.0.0.1:8080": 0.97, "10.0.0.3:8080": 0.01},
        loads_after={"10.0.0.1:8080": 0.97, "10.0.0.3:8080": 0.01},
        blocked=(BlockedBroker("10.0.0.1:8080", 0.97, BlockReason.NO_DESTINATION),),
    )
    controller = MagicMock()
    controller.mover.last_loads = {"east": ClusterLoads(loads, {})}
    controller.mover.drain_progress = DrainProgress()  # no broker draining
    controller.last_move_plans = {"east": plan}
    handler = AppHandler(controller, metrics, LiveState(), lambda _ns: BundleLimits())
    handler.handle(batch_report(batch_id=1, window_end_ms=60_000))
    value = registry.get_sample_value
    east = {"cluster": "east"}
    ratio = "pulsar_balancer_broker_load_ratio"
    labels = {**east, "broker": "10.0.0.1:8080", "source": "load_report"}
    assert value(ratio, labels) == 0.97
    assert value("pulsar_balancer_broker_load_spread_ratio", east) == 0.96
    assert value("pulsar_balancer_cluster_brokers_balanced", east) == 0.0
    blocked = {**east, "broker": "10.0.0.1:8080", "reason": "no_destination"}
    assert value("pulsar_balancer_broker_move_blocked", blocked) == 1.0
    # The next window makes no plan for east (no broker read): its series go.
    controller.last_move_plans = {}
    handler.handle(batch_report(batch_id=2, window_end_ms=120_000))
    assert value(ratio, labels) is None
    assert value("pulsar_balancer_broker_move_blocked", blocked) is None
