"""The final-mean lower bound on moves (bench.broker_bounds): tighter than minute 0's where
load moves to cheaper brokers, never above what a balancer reaches, and only where its
proof's conditions hold."""

from __future__ import annotations

from dataclasses import replace

from balancer.core.moves.model import MoveSettings
from bench.broker_balance import Ours, moves_lower_bound, moves_oracle, run_one
from bench.broker_bounds import moves_lower_bound_final_mean
from bench.broker_cluster import ClusterScenario, built_in_scenarios


def _scenario(name: str) -> ClusterScenario:
    return next(s for s in built_in_scenarios() if s.name == name)


def test_mixed_capacity_needs_the_largest_first_oracles_moves_not_minute_0s_bound() -> None:
    scenario, settings = _scenario("mixed-capacity"), MoveSettings()
    bound = moves_lower_bound_final_mean(scenario, settings)
    assert bound is not None
    assert bound > moves_lower_bound(scenario, settings)  # 43 > 28: the mean falls
    oracle = moves_oracle(scenario, settings)
    assert oracle is not None and bound <= oracle  # a bound: the oracle balances with it
    ours = run_one(scenario, Ours(), 10, settings)
    assert ours.balanced_at_s is not None and bound <= ours.moves


def test_one_broker_size_gives_no_final_mean_bound() -> None:
    assert moves_lower_bound_final_mean(_scenario("scale-out-5-to-10"), MoveSettings()) is None


def test_a_broker_whose_bandwidth_can_exceed_its_cpu_gives_no_final_mean_bound() -> None:
    scenario = _scenario("mixed-capacity")
    narrow = tuple(replace(b, nic_bytes=1_000_000.0) for b in scenario.brokers)
    assert moves_lower_bound_final_mean(replace(scenario, brokers=narrow), MoveSettings()) is None


def test_the_scenario_bound_is_the_larger_proven_bound() -> None:
    from bench.broker_balance import Figures, targets

    def figures(moves: int) -> Figures:
        f = Figures()
        f.moves, f.balanced_at_s = moves, 60.0
        return f

    results = {"ours": figures(46), "threshold": figures(100)}
    met = targets(results, lower_bound=28, oracle=43, final_mean_bound=43)
    assert met["scenario_lower_bound"] == 43
    assert met["within_10pct_of_lower_bound"] is True  # 46 <= 47.3
    missed = targets({**results, "ours": figures(48)}, 28, 43, 43)
    assert missed["within_10pct_of_lower_bound"] is False  # 48 > 47.3
    # Where no final-mean bound is proven, minute 0's bound is the scenario's.
    alone = targets(results, lower_bound=28, oracle=43, final_mean_bound=None)
    assert alone["scenario_lower_bound"] == 28 and alone["within_10pct_of_lower_bound"] is False
