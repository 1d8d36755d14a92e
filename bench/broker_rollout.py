"""Benchmark `broker_rollout` (issue 43, point 7): a rolling restart of 5 and of 10 brokers,
and a scale in from 10 to 5, in simulated time, against Pulsar alone (its shutdown unloads
and placements, with or without its shedders) and, once merged, against our drain.

A sibling of `bench.broker_balance`: the same cluster model (`bench.broker_cluster`), the
same shedder models (`balancer.core.replay.pulsar_shedders`), decisions once a minute. What
a broker that stops does is modelled as `balancer.sim.broker_stops` does it from Pulsar's source:

- modular load manager (`BrokerService.unloadNamespaceBundlesGracefully`): every bundle it
  owns is unloaded in turn and placed by the leader's
  `ModularLoadManagerImpl.selectBrokerForAssignment` (isolation, "distribute bundles
  evenly", `LeastLongTermMessageRate` with brokers over 85 % scoring infinity), each
  placement seeing the ones before it (preallocated bundles);
- extensible load manager (`ServiceUnitStateChannelImpl.cleanOwnerships`): every bundle
  transferred to `LeastResourceUsageWithWeight`'s pick on the loads last reported (read
  once, at the stop): at random among the brokers at least 10 points under the average.

A restart (`RollingUpdate` of a StatefulSet): highest ordinal first; each broker stops
(its bundles go as above), is down `--down-min` minutes (1: JVM start and readiness), comes
back owning nothing, and the next stops only then. A scale in: the StatefulSet's highest
ordinals terminate one a minute and never come back. Each balancer's shedder (if any) runs
every minute throughout, over the brokers that are up (a stopped broker is unregistered;
the extensible load manager drops its load data, `doCleanup`).

Balancers: `modular-paused` (the modular shutdown alone, shedding paused as Pulsar's
rolling-upgrade guide asks), `threshold`, `uniform` (modular shutdown + that shedder),
`transfer` (extensible shutdown + `TransferShedder`), `ours` (see `OursRollout`).

Per scenario and balancer: moves in total (shutdown, shedding and drain moves alike), the
most moves of one bundle, sessions moved (clients reconnected), broker-minutes over 85 %
from the first stop to the last broker's return, and the time to balanced after the last
step (from the last step to the first minute from which every broker stays within the
target of `MoveSettings` to the horizon; "never" if not).

And `drain-one-100` (`bench.broker_drain`): one broker of six with 100 bundles drained at
`run`'s default pace, against its shutdown alone.

Run: `.venv/bin/python -m bench.broker_rollout` (`--help`). Prints a markdown table and a
last line `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import inspect
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np

from balancer.core import rollout
from balancer.core.moves.decide import decide_moves, is_balanced
from balancer.core.moves.model import MoveSettings
from balancer.core.replay.pulsar_shedders import (
    OVERLOAD_RATIO,
    ModularPlacement,
    ThresholdShedder,
    TransferShedder,
    UniformLoadShedder,
    Unload,
)
from bench import broker_drain
from bench.broker_balance import Ours
from bench.broker_cluster import (
    BrokerSpec,
    ClusterScenario,
    ClusterState,
    _broker_ids,
    _namespaces,
    _spread,
)
from bench.common import header, markdown_table, print_result

CYCLE_S = 60.0
# ServiceConfiguration.loadBalancerAverageResourceUsageDifferenceThresholdPercentage.
USAGE_DIFFERENCE_THRESHOLD = 0.10
LoadManager = Literal["modular", "extensible"]


class Unavailable(Exception):
    """A balancer that cannot run in this tree (the reason is printed)."""


@dataclass(frozen=True)
class RolloutScenario:
    name: str
    description: str
    cluster: ClusterScenario
    kind: Literal["restart", "scale-in"]
    order: tuple[str, ...]  # brokers in the order they stop

    @property
    def final_brokers(self) -> int:
        brokers = len(self.cluster.brokers)
        return brokers if self.kind == "restart" else brokers - len(self.order)


def statefulset_order(brokers: Sequence[BrokerSpec]) -> tuple[str, ...]:
    """A StatefulSet rolls (and scales down) from the highest ordinal: the last broker first,
    as `pulsar-balancer roll start` orders them by default (`balancer.core.rollout`)."""
    return rollout.statefulset_order(b.broker for b in brokers)


def _even_cluster(name: str, brokers: int, msg_rate_in: float, seed: int) -> ClusterScenario:
    """`brokers` brokers, 4 namespaces each with 8 bundles per broker spread round-robin."""
    rng = np.random.default_rng(seed)
    ids = _broker_ids(brokers)
    bundles = _namespaces([_spread(ids, 8 * brokers)] * 4, msg_rate_in=msg_rate_in, rng=rng)
    specs = tuple(BrokerSpec(i) for i in ids)
    return ClusterScenario(name, f"{brokers} brokers", specs, tuple(bundles))


def rollout_scenarios() -> list[RolloutScenario]:
    """Rolling restarts of 5 and 10 brokers at ~0.55 (one down: ~0.69 on the others, or
    ~0.61 of 10), and 10 -> 5 brokers at ~0.35 (~0.7 on the 5 left)."""
    out = []
    for n in (5, 10):
        cluster = _even_cluster(f"rolling-restart-{n}", n, msg_rate_in=1050, seed=43 + n)
        out.append(
            RolloutScenario(
                cluster.name,
                f"{n} brokers at ~0.55 restarted one at a time, highest ordinal first",
                cluster,
                "restart",
                statefulset_order(cluster.brokers),
            )
        )
    cluster = _even_cluster("scale-in-10-to-5", 10, msg_rate_in=670, seed=53)
    out.append(
        RolloutScenario(
            cluster.name,
            "10 brokers at ~0.35, the 5 highest ordinals removed one a minute",
            cluster,
            "scale-in",
            statefulset_order(cluster.brokers)[:5],
        )
    )
    return out


@dataclass(frozen=True)
class Event:
    minute: int
    kind: Literal["stop", "start"]
    broker: str


def timeline(scenario: RolloutScenario, *, down_min: int, first_minute: int = 2) -> list[Event]:
    """When each broker stops and comes back: a restart keeps the next broker up until the
    previous is back; a scale in stops one broker a minute."""
    events: list[Event] = []
    minute = first_minute
    for broker in scenario.order:
        events.append(Event(minute, "stop", broker))
        if scenario.kind == "restart":
            minute += down_min
            events.append(Event(minute, "start", broker))
        else:
            minute += 1
    return events


class RolloutPolicy(Protocol):
    """A balancer during a rollout: what it does before a broker stops (a drain; `leaving`:
    the brokers to empty, the stopping one and, in a scale in, every one removed after it),
    and once a minute (shedding). `load_manager` says whose shutdown hands on what is left."""

    load_manager: LoadManager

    def begin(self, order: tuple[str, ...], last_step_s: float) -> None:
        """The rollout starts, in this order (what `roll start` records); it is over (the
        last broker back) at `last_step_s`."""

    def before_stop(
        self, view: ClusterState, broker: str, leaving: frozenset[str], now_s: float
    ) -> list[Unload]: ...

    def cycle(self, view: ClusterState, now_s: float) -> list[Unload]: ...

    def forget(self, broker: str) -> None: ...


@dataclass
class PulsarAlone:
    """Pulsar with its defaults: nothing before a stop (its shutdown hook does the unloading)
    and its shedder, if any, once a minute."""

    load_manager: LoadManager
    shedder: ThresholdShedder | UniformLoadShedder | TransferShedder | None = None

    def begin(self, order: tuple[str, ...], last_step_s: float) -> None:
        pass  # Pulsar alone knows no order

    def before_stop(
        self, view: ClusterState, broker: str, leaving: frozenset[str], now_s: float
    ) -> list[Unload]:
        return []

    def cycle(self, view: ClusterState, now_s: float) -> list[Unload]:
        return [] if self.shedder is None else self.shedder.cycle(view, now_s)

    def forget(self, broker: str) -> None:
        # doCleanup removes the broker's load data (brokerLoadDataStore().removeAsync).
        if isinstance(self.shedder, TransferShedder):
            self.shedder.ema.pop(broker, None)
            self.shedder.throughput_ema.pop(broker, None)


@dataclass
class OursRollout:
    """Our drain before each stop: `decide_moves(..., draining=leaving)` (the `drain`
    helper's interface, issue 43 point 1: a restart drains the stopping broker, a scale in
    every broker to remove at once, as `plan --drain` of them all does) run cycle after cycle
    until the stopping broker owns nothing (at most `max_cycles`), then our ordinary decision
    once a minute. Pulsar's shedder is paused (point 4); its shutdown finds the broker empty.

    The drain knows the restart order (`begin`, as `roll start` records it): it sends bundles
    to brokers that already restarted, the first drain to the broker that restarts last
    (`balancer.core.rollout.drain_destinations`, the same function `run` uses). The drain's
    cycles all run in the minute of the stop (its pace is not modelled)."""

    load_manager: LoadManager = "modular"
    max_cycles: int = 10
    ours: Ours = field(default_factory=Ours)
    use_order: bool = True  # False: the drain without the order (`ours-unordered`)
    counts_until_s: float = 0.0
    gone: set[str] = field(default_factory=set)  # stopped while marked (a `gone` mark)

    def __post_init__(self) -> None:
        if "draining" not in inspect.signature(decide_moves).parameters:
            raise Unavailable(
                "decide_moves takes no draining= yet (the drain helper's change is not merged)"
            )

    def begin(self, order: tuple[str, ...], last_step_s: float) -> None:
        self.ours.order = order if self.use_order else ()
        # As `run` counts them: from the roll's start to twice the grace period after it.
        self.ours.roll_moves = {} if self.use_order else None
        self.counts_until_s = last_step_s + 2 * self.ours.settings.grace_period_s

    def before_stop(
        self, view: ClusterState, broker: str, leaving: frozenset[str], now_s: float
    ) -> list[Unload]:
        out: list[Unload] = []
        self.ours.draining = leaving
        for _ in range(self.max_cycles):
            if not view.bundles_of(broker):
                break
            unloads = self.ours.cycle(view, now_s)
            if not unloads:
                break
            for u in unloads:
                view.owners[u.bundle] = u.destination
            out += unloads
        # The marks stay on the brokers still to remove (no bundle comes back to them); the
        # stopping one's is `gone` while it is down and cleared once it is back (the restart
        # rule): `cycle` drops it then.
        self.ours.draining = leaving
        self.gone.add(broker)
        return out

    def cycle(self, view: ClusterState, now_s: float) -> list[Unload]:
        if now_s > self.counts_until_s:
            self.ours.roll_moves = None
        back = self.gone & {b.broker for b in view.brokers}  # listed again: the restart rule
        self.ours.draining -= back
        self.gone -= back
        return self.ours.cycle(view, now_s)

    def forget(self, broker: str) -> None:
        pass


POLICIES: dict[str, Callable[[int], RolloutPolicy]] = {
    "modular-paused": lambda seed: PulsarAlone("modular"),
    "threshold": lambda seed: PulsarAlone("modular", ThresholdShedder(seed)),
    "uniform": lambda seed: PulsarAlone("modular", UniformLoadShedder(seed)),
    "transfer": lambda seed: PulsarAlone("extensible", TransferShedder()),
    "ours": lambda seed: OursRollout(),
    "ours-unordered": lambda seed: OursRollout(use_order=False),
}
PULSAR = ("modular-paused", "threshold", "uniform", "transfer")


def view_of(state: ClusterState, down: set[str]) -> ClusterState:
    """The cluster as the load manager sees it: the brokers that are up, the same owners."""
    active = tuple(b for b in state.scenario.brokers if b.broker not in down)
    return ClusterState(replace(state.scenario, brokers=active), state.owners)


def shutdown_moves(
    view: ClusterState, broker: str, load_manager: LoadManager, rng: random.Random
) -> list[Unload]:
    """What the stopping broker's shutdown hands on (`view` without it), each applied."""
    owned = view.bundles_of(broker)
    rest = view_of(view, {broker})
    out: list[Unload] = []
    if load_manager == "modular":
        placement = ModularPlacement(rng.randrange(1 << 30))
        for bundle in owned:
            destination = placement.select(rest, bundle)
            if destination is None:
                continue
            view.owners[bundle.name] = destination
            out.append(Unload(bundle.name, broker, destination))
        return out
    usage = rest.loads()  # the load data last reported, not updated during the cleanup
    for bundle in owned:
        candidates = sorted(rest.allowed_brokers(bundle.namespace) & set(usage)) or sorted(usage)
        if not candidates:
            continue
        average = sum(usage[b] for b in candidates) / len(candidates)
        best = [b for b in candidates if usage[b] + USAGE_DIFFERENCE_THRESHOLD <= average]
        destination = rng.choice(best or candidates)
        view.owners[bundle.name] = destination
        out.append(Unload(bundle.name, broker, destination))
    return out


@dataclass
class RolloutFigures:
    moves: int = 0
    shutdown_moves: int = 0
    max_moves_per_bundle: int = 0
    sessions_moved: int = 0
    overloaded_broker_min: int = 0  # from the first stop to the last step, brokers up
    balanced_after_last_step_s: float | None = None
    last_step_s: float = 0.0
    final_max_load: float = 0.0
    final_min_load: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_rollout(
    scenario: RolloutScenario,
    policy: RolloutPolicy,
    *,
    horizon_min: int,
    down_min: int,
    settings: MoveSettings,
    seed: int = 1,
) -> RolloutFigures:
    state = ClusterState.start(scenario.cluster)
    by_name = {b.name: b for b in scenario.cluster.bundles}
    events = timeline(scenario, down_min=down_min)
    first, last = events[0].minute, events[-1].minute
    rng = random.Random(seed)
    down: set[str] = set()
    moved: Counter[str] = Counter()
    figures = RolloutFigures(last_step_s=last * CYCLE_S)
    balanced_since: float | None = None
    policy.begin(scenario.order, last * CYCLE_S)

    def apply(unloads: Sequence[Unload], *, applied: bool = False) -> None:
        for u in unloads:
            if not applied:
                if state.owners[u.bundle] != u.source or u.destination in down:
                    continue  # stale, or to a broker that is down: no move
                state.owners[u.bundle] = u.destination
            figures.moves += 1
            figures.sessions_moved += by_name[u.bundle].sessions
            moved[u.bundle] += 1

    for minute in range(horizon_min):
        now_s = minute * CYCLE_S
        for event in (e for e in events if e.minute == minute):
            if event.kind == "start":
                down.discard(event.broker)
                continue
            view = view_of(state, down)
            # Brokers that stop and never come back (a scale in): this one and those after.
            leaving = frozenset(
                [event.broker] + [e.broker for e in events if e.minute > minute]
                if scenario.kind == "scale-in"
                else [event.broker]
            )
            apply(policy.before_stop(view, event.broker, leaving, now_s), applied=True)
            handed = shutdown_moves(view, event.broker, policy.load_manager, rng)
            figures.shutdown_moves += len(handed)
            apply(handed, applied=True)
            down.add(event.broker)
            policy.forget(event.broker)
        view = view_of(state, down)
        if minute >= 1:
            apply(policy.cycle(view, now_s))
        loads = view.loads()
        if first <= minute <= last:
            figures.overloaded_broker_min += sum(v > OVERLOAD_RATIO for v in loads.values())
        if minute >= last and is_balanced(loads, settings):
            balanced_since = now_s if balanced_since is None else balanced_since
        else:
            balanced_since = None
    if balanced_since is not None:
        figures.balanced_after_last_step_s = balanced_since - figures.last_step_s
    figures.max_moves_per_bundle = max(moved.values(), default=0)
    final = view_of(state, down).loads()
    figures.final_max_load = round(max(final.values()), 4)
    figures.final_min_load = round(min(final.values()), 4)
    return figures


def move_target(scenario: RolloutScenario) -> float:
    """Issue 43's bound for a rolling restart of N brokers: (1 + 1/N) x bundles, before the
    final balance's own moves (for a scale in, every removed broker's bundles once)."""
    bundles = len(scenario.cluster.bundles)
    if scenario.kind == "restart":
        return (1 + 1 / len(scenario.cluster.brokers)) * bundles
    removed = set(scenario.order)
    return float(sum(b.owner in removed for b in scenario.cluster.bundles))


def final_balance_bound(scenario: RolloutScenario, settings: MoveSettings) -> int:
    """The final balance's own lower bound after a rolling restart: the broker that restarts
    last comes back owning nothing and must reach `mean - margin` (no idle broker beside busy
    ones, `is_balanced`): the fewest bundles, largest first, that carry that much. 0 for a
    scale in (the brokers that stay were never emptied)."""
    if scenario.kind != "restart":
        return 0
    state = ClusterState.start(scenario.cluster)
    last = scenario.order[-1]
    mean = sum(state.loads().values()) / len(scenario.cluster.brokers)
    sizes = sorted((state.bundle_load_on(b, last) for b in scenario.cluster.bundles), reverse=True)
    need, moves = mean - settings.margin, 0
    for size in sizes:
        if need <= 0:
            break
        need -= size
        moves += 1
    return moves


def targets(
    scenario: RolloutScenario, results: dict[str, RolloutFigures], settings: MoveSettings
) -> dict[str, Any]:
    """Issue 43's targets for `ours` on this scenario, each with the figure and met or not."""
    ours = results.get("ours")
    pulsar = [results[n] for n in PULSAR if n in results and results[n].error is None]
    if ours is None or ours.error is not None or not pulsar:
        return {}
    out: dict[str, Any] = {}
    if scenario.kind == "restart":
        bound = move_target(scenario) + final_balance_bound(scenario, settings)
        alone = results.get("modular-paused", pulsar[0]).sessions_moved
        out["max moves of a bundle <= 2"] = (
            ours.max_moves_per_bundle,
            ours.max_moves_per_bundle <= 2,
        )
        out[f"moves <= {bound:.0f} ((1 + 1/N) x bundles + final balance)"] = (
            ours.moves,
            ours.moves <= bound,
        )
        out["broker-min over 85 % = 0"] = (
            ours.overloaded_broker_min,
            ours.overloaded_broker_min == 0,
        )
        out[f"sessions moved <= {alone / 2:.0f} (half of Pulsar alone, modular-paused)"] = (
            ours.sessions_moved,
            ours.sessions_moved <= alone / 2,
        )
        out["sessions every bundle's restart moves once (floor of any drain)"] = (
            sum(b.sessions for b in scenario.cluster.bundles),
            None,
        )
    else:
        fewest = min(p.moves for p in pulsar)
        when = ours.balanced_after_last_step_s
        out["balanced within 2 cycles (<= 120 s) after the last drain"] = (
            _fmt_s(when),
            when is not None and when <= 2 * CYCLE_S,
        )
        out[f"moves < {fewest} (fewest of any Pulsar model)"] = (ours.moves, ours.moves < fewest)
    return out


def _fmt_s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--horizon-min", type=int, default=90, help="simulated minutes (90)")
    parser.add_argument("--down-min", type=int, default=1, help="minutes a restart is down (1)")
    parser.add_argument(
        "--balancers", default=",".join(POLICIES), help="comma list (ours,threshold,...)"
    )
    parser.add_argument("--scenarios", default="", help="comma list of names (default all)")
    parser.add_argument("--seed", type=int, default=1, help="placement tie-break seed (1)")
    args = parser.parse_args(argv)
    names = [n for n in args.balancers.split(",") if n]
    unknown = set(names) - set(POLICIES)
    if unknown:
        parser.error(f"unknown balancers: {sorted(unknown)}")
    scenarios = rollout_scenarios()
    wanted = set(args.scenarios.split(",")) if args.scenarios else None
    if wanted is not None:
        scenarios = [s for s in scenarios if s.name in wanted]
    settings = MoveSettings()
    print(header("Broker rollout: restarts and scale in, Pulsar alone and ours"))
    rows = []
    payload: dict[str, Any] = {
        "horizon_min": args.horizon_min,
        "down_min": args.down_min,
        "scenarios": {},
    }
    for scenario in scenarios:
        results: dict[str, RolloutFigures] = {}
        for name in names:
            try:
                policy = POLICIES[name](args.seed)
            except Unavailable as exc:
                print(f"- {scenario.name}/{name}: skipped: {exc}")
                results[name] = RolloutFigures(error=f"skipped: {exc}")
                continue
            results[name] = run_rollout(
                scenario,
                policy,
                horizon_min=args.horizon_min,
                down_min=args.down_min,
                settings=settings,
                seed=args.seed,
            )
        for name, f in results.items():
            rows.append(
                [
                    scenario.name,
                    name,
                    f.moves,
                    f.shutdown_moves,
                    f.max_moves_per_bundle,
                    f.sessions_moved,
                    f.overloaded_broker_min,
                    _fmt_s(f.balanced_after_last_step_s),
                    f"{f.final_max_load:.2f}",
                    f"{f.final_min_load:.2f}",
                ]
                if f.error is None
                else [scenario.name, name, f.error, "", "", "", "", "", "", ""]
            )
        met = targets(scenario, results, settings)
        payload["scenarios"][scenario.name] = {
            "targets": {k: {"value": v, "met": ok} for k, (v, ok) in met.items()},
            "final_balance_bound": final_balance_bound(scenario, settings),
            "description": scenario.description,
            "brokers": len(scenario.cluster.brokers),
            "final_brokers": scenario.final_brokers,
            "bundles": len(scenario.cluster.bundles),
            "order": list(scenario.order),
            "move_target": round(move_target(scenario), 1),
            "balancers": {k: v.to_dict() for k, v in results.items()},
        }
    if rows:
        print(
            markdown_table(
                [
                    "scenario",
                    "balancer",
                    "moves",
                    "shutdown moves",
                    "max moves of a bundle",
                    "sessions moved",
                    "broker-min > 85 % in rollout",
                    "balanced after last step",
                    "final max",
                    "final min",
                ],
                rows,
            )
        )
        print()
    for name, entry in payload["scenarios"].items():
        print(
            f"- {name}: {entry['bundles']} bundles, {entry['brokers']} -> "
            f"{entry['final_brokers']} brokers; issue 43's move bound before the final "
            f"balance: {entry['move_target']}, the final balance's: "
            f"{entry['final_balance_bound']}"
        )
        for target, got in entry["targets"].items():
            verdict = {True: "met", False: "MISSED", None: "(reference)"}[got["met"]]
            print(f"  - ours: {target}: {got['value']} {verdict}")
    if wanted is None or broker_drain.NAME in wanted:
        drain_rows, lines, entry = broker_drain.drain_report(
            horizon_min=args.horizon_min, seed=args.seed, settings=settings
        )
        print()
        print(markdown_table(broker_drain.DRAIN_COLUMNS, drain_rows))
        print()
        print("\n".join(lines))
        payload["scenarios"][broker_drain.NAME] = entry
    print_result(payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
