"""A broker's memory (weight 1.0, Pulsar's default) is a floor no bundle move changes: a
move shifts traffic (cpu, bandwidth), and a broker's load is max(floor, traffic)."""

from __future__ import annotations

import pytest

from balancer.core.broker_load import BrokerLoad, LoadSource, LoadWeights, Resource
from balancer.core.moves.decide import decide_moves
from balancer.core.moves.inputs import broker_states
from balancer.core.moves.model import MoveSettings, PlacementRules
from tests.core.moves_fixtures import CAP, broker, bundle


def test_a_move_onto_a_broker_at_its_memory_floor_adds_to_its_traffic_not_its_floor() -> None:
    # busy: traffic 0.9 in three bundles of 0.3; idle: traffic 0.05 under a 0.25 memory floor.
    brokers = [
        broker("busy:1", 0.9, floor_ratio=0.25, traffic_ratio=0.9),
        broker("idle:1", 0.25, floor_ratio=0.25, traffic_ratio=0.05),
    ]
    bundles = [bundle("t/ns", i, "busy:1", 300.0, sessions=1, topics=1) for i in range(3)]
    plan = decide_moves(
        "c",
        brokers,
        bundles,
        rules=PlacementRules(),
        settings=MoveSettings(),
        now_ms=0,
        window_end_ms=0,
    )
    assert len(plan.moves) == 1
    assert plan.loads_after["idle:1"] == pytest.approx(0.35)  # 0.05 + 0.3, not 0.25 + 0.3
    assert plan.loads_after["busy:1"] == pytest.approx(0.6)


def test_broker_states_split_a_reported_load_into_floor_and_traffic() -> None:
    load = BrokerLoad(
        cluster="c",
        broker="idle:1",
        window_end_ms=0,
        load_ratio=0.25,
        source=LoadSource.LOAD_REPORT,
        resource_ratios={Resource.MEMORY: 0.25, Resource.CPU: 0.05},
    )
    (state,) = broker_states([load], weights=LoadWeights(), configured={"idle:1": CAP})
    assert (state.floor_ratio, state.traffic) == (0.25, 0.05)
