"""Scenario `drain-one-100` of `bench.broker_rollout` (issue 43's target "a drain of one
broker with 100 bundles: done within the configured pace, no destination over its target,
zero moves twice").

Six brokers own 100 bundles each (4 namespaces of 150 bundles spread round-robin, ~0.55
each; ~0.66 on the five left once one is empty). The last ordinal is drained:

- `ours`: the broker marked draining and `decide_moves(..., draining=, drain_pace=)` once a
  minute (`run`'s cycle: one window a minute) with `run`'s default pace
  (`moves.drain_moves_in_flight_per_broker` 4, `moves.drain_moves_per_minute` 20) as
  `MovePlanner._drain_pace` applies it. A move is in flight from its decision until it is
  owned at its destination, modelled as `--land-cycles` cycles (1: owned by the next
  cycle). Our ordinary balance runs in the same cycles. The mark stays to the horizon.
- Pulsar alone (`modular-paused`, `transfer`): the broker's shutdown at minute 0 hands on
  every bundle at once (`shutdown_moves`), then that balancer's shedder, if any, a minute.

Figures: minutes until the broker owns nothing (cycles run; Pulsar: 0, the shutdown), the
pace's minimum (ceil(100 / min(in flight per broker x cycles a move stays in flight...,
per minute)): with one cycle a minute and moves owned by the next, min(4, 20) a minute),
the most loaded staying broker during the drain and at the horizon against the drain's
target (min(mean over the staying brokers of all the load + margin, overload ratio), as
`balancer.core.moves.drain.drain_target`), and bundles moved more than once.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from balancer.controller.move_planning import DRAIN_IN_FLIGHT_PER_BROKER, DRAIN_MOVES_PER_MINUTE
from balancer.core.moves.drain import DrainPace
from balancer.core.moves.model import MoveSettings
from balancer.core.replay.pulsar_shedders import TransferShedder, Unload
from bench.broker_balance import Ours
from bench.broker_cluster import (
    BrokerSpec,
    ClusterScenario,
    ClusterState,
    _broker_ids,
    _namespaces,
    _spread,
)

CYCLE_S = 60.0
NAME = "drain-one-100"
EPSILON = 1e-9


@dataclass(frozen=True)
class DrainScenario:
    name: str
    description: str
    cluster: ClusterScenario
    broker: str  # the broker drained

    @property
    def bundles_to_drain(self) -> int:
        return sum(b.owner == self.broker for b in self.cluster.bundles)


def drain_one_scenario(
    brokers: int = 6, bundles_per_broker: int = 100, msg_rate_in: float = 336.0, seed: int = 100
) -> DrainScenario:
    """`brokers` brokers owning `bundles_per_broker` bundles each (4 namespaces spread
    round-robin, ~`msg_rate_in` msg/s in and out a bundle: ~0.55 a broker by default); the
    highest ordinal is drained (the one a StatefulSet restarts first)."""
    rng = np.random.default_rng(seed)
    ids = _broker_ids(brokers)
    per_namespace = brokers * bundles_per_broker // 4
    bundles = _namespaces([_spread(ids, per_namespace)] * 4, msg_rate_in=msg_rate_in, rng=rng)
    cluster = ClusterScenario(
        NAME, f"{brokers} brokers", tuple(BrokerSpec(i) for i in ids), tuple(bundles)
    )
    return DrainScenario(
        NAME,
        f"{brokers} brokers at ~0.55 owning {bundles_per_broker} bundles each; the last drained",
        cluster,
        ids[-1],
    )


def drain_target(state: ClusterState, leaving: str, settings: MoveSettings) -> float:
    """min(mean + margin, overload ratio), the mean over the staying brokers of the whole
    cluster's load (the brokers are alike: a bundle's load is the same on any)."""
    loads = state.loads()
    staying = [b for b in loads if b != leaving]
    mean = sum(loads.values()) / len(staying)
    return min(mean + settings.margin, settings.overload_ratio)


def pace_minimum_min(bundles: int, in_flight: int, per_minute: int, land_cycles: int) -> int:
    """The fewest one-minute cycles the pace allows: each cycle starts at most
    min(in flight per broker / cycles a move stays in flight, per minute) drain moves."""
    per_cycle = min(in_flight / land_cycles, per_minute)
    return math.ceil(bundles / per_cycle) if per_cycle > 0 else 0


@dataclass
class DrainFigures:
    moves: int = 0
    drain_moves: int = 0  # off the drained broker
    minutes_to_empty: int | None = None
    max_destination_load_during: float = 0.0
    max_destination_load_after: float = 0.0
    bundles_moved_twice: int = 0
    sessions_moved: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _staying_max(state: ClusterState, leaving: str, down: set[str]) -> float:
    loads = state.loads()
    return round(max(v for b, v in loads.items() if b != leaving and b not in down), 4)


def run_ours(
    scenario: DrainScenario,
    *,
    horizon_min: int,
    settings: MoveSettings,
    in_flight_per_broker: int = DRAIN_IN_FLIGHT_PER_BROKER,
    per_minute: int = DRAIN_MOVES_PER_MINUTE,
    land_cycles: int = 1,
) -> DrainFigures:
    state = ClusterState.start(scenario.cluster)
    by_name = {b.name: b for b in scenario.cluster.bundles}
    ours = Ours(settings=settings, draining=frozenset([scenario.broker]))
    figures = DrainFigures()
    moved: Counter[str] = Counter()
    drains: list[tuple[int, str]] = []  # (minute decided, source) of each drain move
    for minute in range(horizon_min):
        in_flight = sum(1 for m, _ in drains if m + land_cycles > minute)
        last_minute = sum(1 for m, _ in drains if (minute - m) * CYCLE_S < CYCLE_S)
        ours.drain_pace = DrainPace(
            per_broker={scenario.broker: max(0, in_flight_per_broker - in_flight)},
            cluster=max(0, per_minute - last_minute),
        )
        for u in ours.cycle(state, minute * CYCLE_S):
            if state.owners[u.bundle] != u.source:
                continue
            state.owners[u.bundle] = u.destination
            figures.moves += 1
            figures.sessions_moved += by_name[u.bundle].sessions
            moved[u.bundle] += 1
            if u.source == scenario.broker:
                figures.drain_moves += 1
                drains.append((minute, u.source))
        if figures.minutes_to_empty is None:
            figures.max_destination_load_during = max(
                figures.max_destination_load_during, _staying_max(state, scenario.broker, set())
            )
            if not state.bundles_of(scenario.broker):
                figures.minutes_to_empty = minute + 1
    figures.max_destination_load_after = _staying_max(state, scenario.broker, set())
    figures.bundles_moved_twice = sum(n > 1 for n in moved.values())
    return figures


def run_pulsar(
    scenario: DrainScenario, load_manager: str, *, horizon_min: int, seed: int
) -> DrainFigures:
    """Pulsar alone: the broker shuts down at minute 0 (its shutdown hands every bundle on),
    then the extensible load manager's `TransferShedder` a minute (the modular one paused)."""
    from bench.broker_rollout import shutdown_moves, view_of  # broker_rollout imports this

    state = ClusterState.start(scenario.cluster)
    by_name = {b.name: b for b in scenario.cluster.bundles}
    down = {scenario.broker}
    shedder = TransferShedder() if load_manager == "extensible" else None
    figures = DrainFigures(minutes_to_empty=0)
    moved: Counter[str] = Counter()

    def count(unloads: list[Unload]) -> None:
        for u in unloads:
            figures.moves += 1
            figures.sessions_moved += by_name[u.bundle].sessions
            moved[u.bundle] += 1

    handed = shutdown_moves(
        state, scenario.broker, "modular" if shedder is None else "extensible", random.Random(seed)
    )
    figures.drain_moves = len(handed)
    count(handed)
    figures.max_destination_load_during = _staying_max(state, scenario.broker, down)
    for minute in range(1, horizon_min):
        if shedder is None:
            break
        done = []
        for u in shedder.cycle(view_of(state, down), minute * CYCLE_S):
            if state.owners[u.bundle] == u.source and u.destination not in down:
                state.owners[u.bundle] = u.destination
                done.append(u)
        count(done)
    figures.max_destination_load_after = _staying_max(state, scenario.broker, down)
    figures.bundles_moved_twice = sum(n > 1 for n in moved.values())
    return figures


def drain_report(
    *, horizon_min: int, seed: int, settings: MoveSettings
) -> tuple[list[list[Any]], list[str], dict[str, Any]]:
    """The scenario's table rows, target lines and JSON entry."""
    scenario = drain_one_scenario()
    target = drain_target(ClusterState.start(scenario.cluster), scenario.broker, settings)
    n = scenario.bundles_to_drain
    minimum = pace_minimum_min(n, DRAIN_IN_FLIGHT_PER_BROKER, DRAIN_MOVES_PER_MINUTE, 1)
    per_minute_only = math.ceil(n / DRAIN_MOVES_PER_MINUTE)
    results = {
        "ours": run_ours(scenario, horizon_min=horizon_min, settings=settings),
        "modular-paused": run_pulsar(scenario, "modular", horizon_min=horizon_min, seed=seed),
        "transfer": run_pulsar(scenario, "extensible", horizon_min=horizon_min, seed=seed),
    }
    rows = [
        [
            scenario.name,
            name,
            f.moves,
            f.drain_moves,
            "never" if f.minutes_to_empty is None else f"{f.minutes_to_empty} min",
            f"{f.max_destination_load_during:.3f}",
            f"{f.max_destination_load_after:.3f}",
            f.bundles_moved_twice,
            f.sessions_moved,
        ]
        for name, f in results.items()
    ]
    ours = results["ours"]
    targets = {
        f"empty within the pace's minimum ({minimum} min = ceil({n} / min(in flight "
        f"{DRAIN_IN_FLIGHT_PER_BROKER} a cycle, {DRAIN_MOVES_PER_MINUTE} a minute)); "
        f"per-minute pace alone: {per_minute_only} min)": (
            ours.minutes_to_empty,
            ours.minutes_to_empty is not None and ours.minutes_to_empty <= minimum,
        ),
        f"no destination over its target {target:.3f} during the drain": (
            ours.max_destination_load_during,
            ours.max_destination_load_during <= target + EPSILON,
        ),
        f"no destination over its target {target:.3f} after": (
            ours.max_destination_load_after,
            ours.max_destination_load_after <= target + EPSILON,
        ),
        "zero bundles moved twice": (ours.bundles_moved_twice, ours.bundles_moved_twice == 0),
    }
    lines = [
        f"- {scenario.name}: {len(scenario.cluster.bundles)} bundles on "
        f"{len(scenario.cluster.brokers)} brokers, {n} on {scenario.broker} (drained)"
    ]
    for text, (value, ok) in targets.items():
        lines.append(f"  - ours: {text}: {value} {'met' if ok else 'MISSED'}")
    entry = {
        "description": scenario.description,
        "bundles": len(scenario.cluster.bundles),
        "drained_bundles": n,
        "target": round(target, 4),
        "pace_minimum_min": minimum,
        "per_minute_only_min": per_minute_only,
        "targets": {k: {"value": v, "met": ok} for k, (v, ok) in targets.items()},
        "balancers": {k: v.to_dict() for k, v in results.items()},
    }
    return rows, lines, entry


DRAIN_COLUMNS = [
    "scenario",
    "balancer",
    "moves",
    "moves off the broker",
    "empty after",
    "max destination load, drain",
    "max destination load, end",
    "bundles moved twice",
    "sessions moved",
]
