"""A broker's traffic is cpu and bandwidth apart (Pulsar's load is the larger of its
weighted resources, LocalBrokerData.getMaxResourceUsageWithWeight): a bundle's msg rate
moves cpu, its throughput moves bandwidth, so a msg-heavy bundle added to a bandwidth-bound
broker raises its load by less than the bundle's own load."""

from __future__ import annotations

import pytest

from balancer.core.broker_load import BrokerLoad, LoadSource, LoadWeights, Resource
from balancer.core.moves.decide import decide_moves
from balancer.core.moves.inputs import broker_states
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    MovePlan,
    MoveSettings,
    PlacementRules,
)
from tests.core.moves_fixtures import CAP, broker, bundle


def _plan(brokers: list[BrokerState], bundles: list[BundleState]) -> MovePlan:
    return decide_moves(
        "c",
        brokers,
        bundles,
        rules=PlacementRules(),
        settings=MoveSettings(),
        now_ms=0,
        window_end_ms=0,
    )


def test_a_msg_heavy_bundle_onto_a_bandwidth_bound_broker_adds_to_its_cpu_only() -> None:
    # busy: cpu 0.9 in three msg-only bundles of 0.3; other: bandwidth 0.3, cpu 0.05.
    brokers = [
        broker("busy:1", 0.9, cpu_ratio=0.9, bandwidth_ratio=0.0),
        broker("other:1", 0.3, cpu_ratio=0.05, bandwidth_ratio=0.3),
    ]
    bundles = [bundle("t/ns", i, "busy:1", 300.0, sessions=1, topics=1) for i in range(3)]
    plan = _plan(brokers, bundles)
    assert len(plan.moves) == 1
    # cpu 0.05 + 0.3 = 0.35 over bandwidth 0.3; not 0.3 + 0.3 as one number.
    assert plan.loads_after["other:1"] == pytest.approx(0.35)
    assert plan.moves[0].destination_load_after == pytest.approx(0.35)
    assert plan.loads_after["busy:1"] == pytest.approx(0.6)


def test_without_resources_a_bundle_adds_its_load_to_the_traffic() -> None:
    brokers = [broker("busy:1", 0.9), broker("other:1", 0.3)]
    bundles = [bundle("t/ns", i, "busy:1", 300.0, sessions=1, topics=1) for i in range(3)]
    plan = _plan(brokers, bundles)
    assert plan.loads_after["other:1"] == pytest.approx(0.6)


def test_broker_states_carry_the_reports_cpu_and_larger_bandwidth_weighted() -> None:
    load = BrokerLoad(
        cluster="c",
        broker="b:1",
        window_end_ms=0,
        load_ratio=0.3,
        source=LoadSource.LOAD_REPORT,
        resource_ratios={
            Resource.CPU: 0.2,
            Resource.BANDWIDTH_IN: 0.3,
            Resource.BANDWIDTH_OUT: 0.1,
            Resource.MEMORY: 0.25,
        },
    )
    weights = LoadWeights()
    (state,) = broker_states([load], weights=weights, configured={"b:1": CAP})
    assert state.cpu_ratio == pytest.approx(0.2 * weights.cpu)
    assert state.bandwidth_ratio == pytest.approx(0.3 * weights.bandwidth_in)


def test_broker_states_without_resource_ratios_keep_one_traffic_number() -> None:
    load = BrokerLoad(
        cluster="c",
        broker="b:1",
        window_end_ms=0,
        load_ratio=0.3,
        source=LoadSource.BUNDLES,
        resource_ratios={},
    )
    (state,) = broker_states([load], weights=LoadWeights(), configured={"b:1": CAP})
    assert (state.cpu_ratio, state.bandwidth_ratio) == (None, None)
