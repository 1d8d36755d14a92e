"""Benchmark 1, split quality: the five split algorithms on every scenario file.

For each scenario and algorithm, starting from the scenario's initial bundle layouts and
the loads of the simulator's traffic model at one simulated instant:

- ROUNDS: a round is one detection and split cycle. Every bundle over Pulsar's default
  thresholds (topics 1000, sessions 1000, msgRate 30000 in+out, bandwidth 100 MiB/s in+out;
  `balancer.core.detect.over_threshold`) is split once with the algorithm, most severe first
  (reason priority, then heaviest msgRate), at most 10 splits per cluster and round
  (Pulsar's loadBalancerMaxNumberOfBundlesToSplitPerCycle), never a bundle with < 2 topics
  or width <= 1, never past 128 bundles per namespace (the detector's rules). Rounds repeat
  until every bundle is under threshold, or no over-threshold bundle can be split any more
  ("stalled", with the reason), or 50 rounds.
- Children created (k+1 per split, intermediate children included), bundles before and
  after, the heaviest child left in the final layout as a share of the threshold (the
  largest of the four ratios).
- A following simulated day of 5 % hourly growth: every rate times 1.05^h for h = 1..24
  (the instant is held fixed, so only growth changes); each hour detection and split cycles
  repeat until nothing more is split (at most 15 an hour: one-minute checks with a hit count
  of 3 leave room for about 15) and every split counts as a re-split.

specified_positions_divide needs positions from the operator. We use what PIP-143 suggests
an operator does with `topicHashPositions`: take the bundle's *outstanding* topics (a topic
carrying >= 10 % of any threshold on its own) and put a boundary on each side of each of
them, at the midpoint between its hash position and its neighbour's (Pulsar's midpoint rule
`a + (b - a) / 2 + 1`, so the outstanding topic gets a bundle of its own); a bundle with no
outstanding topic is cut at the midpoint of its two middle hash positions.

flow_or_qps_equally_divide is applied with all its boundaries (as the modular load manager
does); the extensible load manager's one-boundary limit is in the reaction-time benchmark.

Run: `.venv/bin/python -m bench.split_quality` (add `--help` for options). Prints the figures
as markdown, the machine, and a last line `RESULT <json>`; draws one PNG per scenario.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.decisions import REASON_PRIORITY
from balancer.core.detect import over_threshold
from balancer.core.limits import BundleLimits, LoadTotals, max_ratio
from balancer.core.load import BundleLoad, TopicLoad, roll_up
from balancer.core.split import SplitAlgorithm, SplitError, SplitOptions, compute_split
from balancer.core.thresholds import DEFAULT_MAX_BUNDLES
from balancer.sim.scenarios import Scenario, load_scenario
from bench.common import (
    IMG_DIR,
    ScenarioLoads,
    header,
    last_change_s,
    markdown_table,
    print_result,
    scenario_files,
    topics_by_bundle,
)

ALGORITHMS: tuple[SplitAlgorithm, ...] = (
    SplitAlgorithm.BALANCED_FLOW_DIVIDE,
    SplitAlgorithm.RANGE_EQUALLY_DIVIDE,
    SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE,
    SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE,
    SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE,
)
PULSAR_ALGORITHMS = ALGORITHMS[1:]
SHORT_NAMES = {
    SplitAlgorithm.BALANCED_FLOW_DIVIDE: "balanced",
    SplitAlgorithm.RANGE_EQUALLY_DIVIDE: "range",
    SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE: "topic_count",
    SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE: "flow_or_qps",
    SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE: "specified",
}
MAX_SPLITS_PER_CYCLE = 10
OUTSTANDING_SHARE = 0.10  # a topic with >= 10 % of any threshold on its own
FILL_FACTOR = 0.8  # the detector's default for balanced_flow_divide
DIFFERENCE_THRESHOLD_PCT = 10.0  # flow_or_qps_equally_divide's margin (Pulsar's default)

LIMITS = BundleLimits()  # Pulsar's defaults
OVER_COLOR, LONE_COLOR, UNDER_COLOR = "#d62728", "#ff9f40", "#1f77b4"
# Why over-threshold bundles were left, in words for the table.
STALL_WORDS = {
    "too_few_topics": "lone topic(s) over",
    "no_boundary": "with no valid boundary",
    "max_bundles": "bundle(s) at the 128-bundle limit",
    "unsplittable": "bundle(s) of width 1",
    "rejected_by_pulsar": "split(s) Pulsar would reject",
    "round_limit": "round limit reached",
}


def _midpoint(a: int, b: int) -> int:
    """Pulsar's midpoint rule: a boundary in (a, b], so a stays left and b goes right."""
    return a + (b - a) // 2 + 1


def specified_positions(
    topics: Sequence[TopicLoad], limits: BundleLimits = LIMITS
) -> tuple[int, ...]:
    """The positions an operator would send with specified_positions_divide (module doc)."""
    ordered = sorted(topics, key=lambda t: t.position)
    positions = [t.position for t in ordered]
    chosen: set[int] = set()
    for i, t in enumerate(ordered):
        share = max_ratio(
            LoadTotals(
                session_count=t.sessions, msg_rate=t.msg_rate, throughput_bytes=t.throughput_bytes
            ),
            limits,
        )
        if share < OUTSTANDING_SHARE:
            continue
        if i > 0 and positions[i - 1] < positions[i]:
            chosen.add(_midpoint(positions[i - 1], positions[i]))
        if i + 1 < len(ordered) and positions[i] < positions[i + 1]:
            chosen.add(_midpoint(positions[i], positions[i + 1]))
    if not chosen and len(positions) >= 2:
        n = len(positions)
        a, b = positions[n // 2 - 1], positions[n // 2]
        if a < b:
            chosen.add(_midpoint(a, b))
    return tuple(sorted(chosen))


@dataclass
class NamespaceRun:
    index: int  # in the scenario
    name: str
    cluster: str
    layout: NamespaceBundles
    initial: frozenset[BundleRange]


@dataclass
class RoundOutcome:
    over: int  # bundles over threshold at the start of the round
    splits: int
    children: int
    capped: int  # over-threshold bundles left for the next round by the cycle cap
    skipped: Counter[str] = field(default_factory=Counter)


LoadsFn = Callable[[int], list[TopicLoad]]  # namespace index -> its topics' loads


def bundle_loads(run: NamespaceRun, topics: Sequence[TopicLoad]) -> list[BundleLoad]:
    grouped = topics_by_bundle(run.layout.bundles, topics)
    return [
        roll_up(
            cluster=run.cluster,
            namespace=run.name,
            bundle=bundle,
            window_end_ms=0,
            topics=tuple(members),
        )
        for bundle, members in grouped.items()
    ]


def _split_one(
    run: NamespaceRun, load: BundleLoad, algorithm: SplitAlgorithm, fill_factor: float
) -> tuple[int, ...] | str:
    """The boundaries to apply, or why the bundle is not split (the detector's rules)."""
    if load.topic_count < 2:
        return "too_few_topics"
    if not load.bundle.splittable:
        return "unsplittable"
    remaining = DEFAULT_MAX_BUNDLES - run.layout.num_bundles
    if remaining <= 0:
        return "max_bundles"
    positions: tuple[int, ...] = ()
    if algorithm is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE:
        positions = specified_positions(load.topics)
        if not positions:
            return "no_boundary"
    options = replace(
        SplitOptions.from_limits(LIMITS),
        difference_threshold_pct=DIFFERENCE_THRESHOLD_PCT,
        fill_factor=fill_factor,
        max_children=remaining + 1,
        positions=positions,
    )
    try:
        result = compute_split(algorithm, load.bundle, load.topics, options)
    except SplitError:
        return "rejected_by_pulsar"
    if not result.boundaries:
        return "no_boundary"
    if len(result.boundaries) > remaining:
        return "max_bundles"
    return result.boundaries


def run_round(
    runs: Sequence[NamespaceRun],
    loads: LoadsFn,
    algorithm: SplitAlgorithm,
    fill_factor: float = FILL_FACTOR,
) -> RoundOutcome:
    """One detection and split cycle over every cluster (the cap applies per cluster)."""
    outcome = RoundOutcome(over=0, splits=0, children=0, capped=0)
    for cluster in sorted({r.cluster for r in runs}):
        candidates: list[tuple[tuple[Any, ...], NamespaceRun, BundleLoad]] = []
        for run in (r for r in runs if r.cluster == cluster):
            for load in bundle_loads(run, loads(run.index)):
                reasons = over_threshold(load, LIMITS)
                if reasons:
                    key = (
                        REASON_PRIORITY.index(reasons[0]),
                        -load.msg_rate,
                        -load.throughput_bytes,
                        run.name,
                        load.bundle.lower,
                    )
                    candidates.append((key, run, load))
        outcome.over += len(candidates)
        splits_here = 0
        for _, run, load in sorted(candidates, key=lambda c: c[0]):
            if splits_here >= MAX_SPLITS_PER_CYCLE:
                outcome.capped += 1
                continue
            decided = _split_one(run, load, algorithm, fill_factor)
            if isinstance(decided, str):
                outcome.skipped[decided] += 1
                continue
            run.layout, children = run.layout.split(load.bundle, decided)
            splits_here += 1
            outcome.children += len(children)
        outcome.splits += splits_here
    return outcome


@dataclass
class Convergence:
    rounds: int  # rounds that split something
    splits: int
    children: int
    converged: bool  # every bundle ended under threshold
    stalled: Counter[str]  # why over-threshold bundles were left (empty when converged)


def converge(
    runs: Sequence[NamespaceRun],
    loads: LoadsFn,
    algorithm: SplitAlgorithm,
    max_rounds: int,
    fill_factor: float = FILL_FACTOR,
) -> Convergence:
    result = Convergence(0, 0, 0, False, Counter())
    for _ in range(max_rounds):
        outcome = run_round(runs, loads, algorithm, fill_factor)
        if outcome.over == 0:
            result.converged, result.stalled = True, Counter()
            return result
        if outcome.splits == 0:
            result.stalled = outcome.skipped
            return result
        result.rounds += 1
        result.splits += outcome.splits
        result.children += outcome.children
    result.stalled = Counter({"round_limit": 1})
    return result


@dataclass
class AlgorithmRun:
    algorithm: SplitAlgorithm
    convergence: Convergence
    bundles_before: int
    bundles_after: int
    heaviest_child: float | None  # ratio of the heaviest bundle created by a split, if any
    final_bars: list[tuple[float, bool]]  # (ratio, lone topic) per final bundle, heaviest first
    final_over: int  # bundles of the final layout still over threshold
    growth_splits: int
    growth_bundles_after: int
    growth_stalled: bool  # a bundle was still over threshold at the end of some hour

    @property
    def final_ratios(self) -> list[float]:
        return [ratio for ratio, _ in self.final_bars]

    def status(self) -> str:
        c = self.convergence
        if c.converged:
            return "converged"
        reasons = "; ".join(
            f"{count} {STALL_WORDS.get(reason, reason)}"
            for reason, count in sorted(c.stalled.items())
        )
        return f"never: {reasons}"


def evaluate(
    scenario: Scenario,
    algorithm: SplitAlgorithm,
    *,
    at_s: float,
    max_rounds: int,
    growth_hours: int,
    growth_rate: float,
    rounds_per_hour: int,
    fill_factor: float = FILL_FACTOR,
) -> AlgorithmRun:
    source = ScenarioLoads(scenario)
    runs = [
        NamespaceRun(
            index=i,
            name=ns.name,
            cluster=ns.cluster,
            layout=NamespaceBundles.initial(ns.name, ns.bundles),
            initial=frozenset(NamespaceBundles.initial(ns.name, ns.bundles).bundles),
        )
        for i, ns in enumerate(scenario.namespaces)
    ]
    cache: dict[tuple[int, float], list[TopicLoad]] = {}

    def loads_at(scale: float) -> LoadsFn:
        def loads(index: int) -> list[TopicLoad]:
            key = (index, scale)
            if key not in cache:
                if len(cache) > 64:  # one growth hour at a time is all that is reused
                    cache.clear()
                cache[key] = source.topic_loads(index, at_s, scale)
            return cache[key]

        return loads

    before = sum(r.layout.num_bundles for r in runs)
    convergence = converge(runs, loads_at(1.0), algorithm, max_rounds, fill_factor)
    final_loads = [
        (load, load.bundle not in run.initial)
        for run in runs
        for load in bundle_loads(run, loads_at(1.0)(run.index))
    ]
    created = [max_ratio(load, LIMITS) for load, is_child in final_loads if is_child]
    after = sum(r.layout.num_bundles for r in runs)
    growth_splits = 0
    growth_stalled = False
    for hour in range(1, growth_hours + 1):
        day = converge(runs, loads_at(growth_rate**hour), algorithm, rounds_per_hour, fill_factor)
        growth_splits += day.splits
        growth_stalled = growth_stalled or not day.converged
    return AlgorithmRun(
        algorithm=algorithm,
        convergence=convergence,
        bundles_before=before,
        bundles_after=after,
        heaviest_child=max(created) if created else None,
        final_bars=_bars(load for load, _ in final_loads),
        final_over=sum(1 for load, _ in final_loads if over_threshold(load, LIMITS)),
        growth_splits=growth_splits,
        growth_bundles_after=sum(r.layout.num_bundles for r in runs),
        growth_stalled=growth_stalled,
    )


def _bars(loads: Iterable[BundleLoad]) -> list[tuple[float, bool]]:
    """(ratio, holds a single topic) per bundle, heaviest first."""
    return sorted(((max_ratio(b, LIMITS), b.topic_count < 2) for b in loads), reverse=True)


def initial_bars(scenario: Scenario, at_s: float) -> list[tuple[float, bool]]:
    source = ScenarioLoads(scenario)
    loads: list[BundleLoad] = []
    for i, ns in enumerate(scenario.namespaces):
        run = NamespaceRun(
            i, ns.name, ns.cluster, NamespaceBundles.initial(ns.name, ns.bundles), frozenset()
        )
        loads.extend(bundle_loads(run, source.topic_loads(i, at_s)))
    return _bars(loads)


def draw(
    scenario: Scenario,
    at_s: float,
    before: list[tuple[float, bool]],
    runs: list[AlgorithmRun],
    out: Path,
) -> None:
    """Bundle loads (share of threshold) before and after each algorithm, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels: list[tuple[str, list[tuple[float, bool]]]] = [
        (f"before: {len(before)} bundles", before),
        *(
            (
                f"{r.algorithm.value}\n{_rounds_text(r)}, {r.bundles_after} bundles",
                r.final_bars,
            )
            for r in runs
        ),
    ]
    top = max(1.2, *(v[0][0] if v else 0.0 for _, v in panels)) * 1.08
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), sharey=True)
    for ax, (title, values) in zip(axes.flat, panels, strict=True):
        pct = [v * 100 for v, _ in values]
        colors = [
            (LONE_COLOR if lone else OVER_COLOR) if v > 1.0 else UNDER_COLOR for v, lone in values
        ]
        ax.bar(range(len(pct)), pct, color=colors, width=0.8)
        ax.axhline(100, color="#d62728", linestyle="--", linewidth=1.5, label="threshold")
        ax.axhline(FILL_FACTOR * 100, color="grey", linestyle=":", linewidth=1, label="80 % target")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, top * 100)
        ax.set_xlim(-0.6, max(len(pct), 4) - 0.4)
        ax.set_xticks([])
        ax.set_xlabel("bundles, heaviest first")
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("load, % of threshold\n(max of topics, sessions, msg/s, MiB/s)")
    handles, _ = axes.flat[0].get_legend_handles_labels()
    handles += [
        Patch(color=OVER_COLOR, label="over threshold"),
        Patch(color=LONE_COLOR, label="over: one topic alone (no split helps)"),
        Patch(color=UNDER_COLOR, label="under threshold"),
    ]
    axes.flat[0].legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle(
        f"Scenario {scenario.name}: bundle loads after each algorithm's split rounds "
        f"(t = {at_s:.0f} s)",
        fontsize=12,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)


def _rounds_text(run: AlgorithmRun) -> str:
    c = run.convergence
    word = "round" if c.rounds == 1 else "rounds"
    if c.converged:
        return f"{c.rounds} {word}"
    left = ", ".join(
        f"{n} {STALL_WORDS.get(reason, reason)}" for reason, n in sorted(c.stalled.items())
    )
    return f"{c.rounds} {word}; {left}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def targets(runs: list[AlgorithmRun]) -> dict[str, Any]:
    """Whether balanced_flow_divide meets the issue's three targets on one scenario.

    "Converges in one round where possible": it reaches its end state (every bundle under
    threshold, or only bundles that no split can help) in at most one round. Bundle counts
    are compared with every Pulsar algorithm, and each one that creates fewer is named,
    with whether it left more bundles over threshold (a cheaper but worse end state).
    """
    by = {r.algorithm: r for r in runs}
    ours = by[SplitAlgorithm.BALANCED_FLOW_DIVIDE]
    ours_new = ours.bundles_after - ours.bundles_before
    fewer_bundles = {
        r.algorithm.value: {
            "new_bundles": r.bundles_after - r.bundles_before,
            "bundles_over_after": r.final_over,
            "worse_end_state": r.final_over > ours.final_over,
        }
        for r in (by[a] for a in PULSAR_ALGORITHMS)
        if r.bundles_after - r.bundles_before < ours_new
    }
    not_fewer_resplits = {
        r.algorithm.value: {
            "growth_splits": r.growth_splits,
            "growth_bundles_after": r.growth_bundles_after,
        }
        for r in (by[a] for a in PULSAR_ALGORITHMS)
        if r.growth_splits <= ours.growth_splits
    }
    return {
        "one_round": ours.convergence.rounds <= 1,
        "no_more_bundles": all(v["worse_end_state"] for v in fewer_bundles.values()),
        "fewer_bundles_by": fewer_bundles,
        # Nothing to re-split for anyone (0 = 0) is not a miss.
        "fewer_resplits": not not_fewer_resplits or ours.growth_splits == 0,
        "not_fewer_resplits_than": not_fewer_resplits,
        "fewest_bundles_after_day": all(
            ours.growth_bundles_after <= r.growth_bundles_after
            for r in (by[a] for a in PULSAR_ALGORITHMS)
        ),
    }


def _bundles_verdict(t: dict[str, Any]) -> str:
    if not t["fewer_bundles_by"]:
        return "yes"
    parts = [
        f"{SHORT_NAMES[SplitAlgorithm(name)]} makes {v['new_bundles']}"
        + (" but leaves more bundles over threshold" if v["worse_end_state"] else "")
        for name, v in t["fewer_bundles_by"].items()
    ]
    return ("yes" if t["no_more_bundles"] else "NO") + " (" + "; ".join(parts) + ")"


def _resplits_verdict(t: dict[str, Any], ours: int) -> str:
    if ours == 0:
        return "n/a (0: no growth split needed)"
    if t["fewer_resplits"]:
        return f"yes ({ours})"
    parts = [
        f"{SHORT_NAMES[SplitAlgorithm(name)]} {v['growth_splits']} "
        f"(ending with {v['growth_bundles_after']} bundles)"
        for name, v in t["not_fewer_resplits_than"].items()
    ]
    return f"NO: {ours} vs " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.split_quality",
        description=(
            "Benchmark 1: split rounds, bundles created, heaviest child and re-splits in a "
            "day of growth, for the five split algorithms on every scenario file."
        ),
    )
    parser.add_argument(
        "scenarios", nargs="*", type=Path, help="scenario YAML files (default: conf/scenarios/*)"
    )
    parser.add_argument(
        "--at-s",
        type=float,
        default=None,
        help="simulated second to take loads at (default: 60 s after the scenario's last "
        "step/ramp change ends)",
    )
    parser.add_argument("--max-rounds", type=int, default=50, help="round cap (default 50)")
    parser.add_argument("--growth-hours", type=int, default=24, help="hours of growth (24)")
    parser.add_argument(
        "--growth-pct", type=float, default=5.0, help="hourly growth in percent (5)"
    )
    parser.add_argument(
        "--rounds-per-hour", type=int, default=15, help="split cycles at most per hour (15)"
    )
    parser.add_argument(
        "--fill-factor",
        type=float,
        default=FILL_FACTOR,
        help="balanced_flow_divide's target share of a threshold per child (detector default 0.8)",
    )
    parser.add_argument(
        "--img-dir", type=Path, default=IMG_DIR, help="where the PNGs go (docs/img)"
    )
    parser.add_argument("--no-png", action="store_true", help="do not draw the PNGs")
    args = parser.parse_args(argv)
    files = args.scenarios or scenario_files()
    growth_rate = 1.0 + args.growth_pct / 100.0

    print(header("Split quality"))
    print(
        f"Thresholds: Pulsar's defaults (topics {LIMITS.max_topics}, sessions "
        f"{LIMITS.max_sessions}, msgRate {LIMITS.max_msg_rate:.0f}/s in+out, bandwidth "
        f"{LIMITS.max_bandwidth_mbytes:.0f} MiB/s in+out); <= {MAX_SPLITS_PER_CYCLE} splits per "
        f"cluster and round; growth {args.growth_pct:g} %/h for {args.growth_hours} h.\n"
    )
    rows: list[list[object]] = []
    summary: dict[str, Any] = {}
    for path in files:
        scenario = load_scenario(path)
        at_s = args.at_s if args.at_s is not None else last_change_s(scenario) + 60.0
        runs = [
            evaluate(
                scenario,
                algorithm,
                at_s=at_s,
                max_rounds=args.max_rounds,
                growth_hours=args.growth_hours,
                growth_rate=growth_rate,
                rounds_per_hour=args.rounds_per_hour,
                fill_factor=args.fill_factor,
            )
            for algorithm in ALGORITHMS
        ]
        before = initial_bars(scenario, at_s)
        for r in runs:
            c = r.convergence
            rows.append(
                [
                    scenario.name,
                    r.algorithm.value,
                    c.rounds,
                    r.status(),
                    c.splits,
                    c.children,
                    f"{r.bundles_before} -> {r.bundles_after}",
                    _pct(r.heaviest_child),
                    _pct(r.final_ratios[0] if r.final_ratios else None),
                    r.growth_splits,
                    r.growth_bundles_after,
                ]
            )
        verdict = targets(runs)
        summary[scenario.name] = {
            "at_s": at_s,
            "max_initial_ratio": before[0][0] if before else 0.0,
            "targets": verdict,
            "algorithms": {
                r.algorithm.value: {
                    "rounds": r.convergence.rounds,
                    "converged": r.convergence.converged,
                    "stalled": dict(r.convergence.stalled),
                    "splits": r.convergence.splits,
                    "children_created": r.convergence.children,
                    "bundles_before": r.bundles_before,
                    "bundles_after": r.bundles_after,
                    "heaviest_child_ratio": r.heaviest_child,
                    "max_final_ratio": r.final_ratios[0] if r.final_ratios else None,
                    "bundles_over_after": r.final_over,
                    "growth_splits": r.growth_splits,
                    "growth_bundles_after": r.growth_bundles_after,
                    "growth_stalled": r.growth_stalled,
                }
                for r in runs
            },
        }
        if not args.no_png:
            out = args.img_dir / f"split-quality-{scenario.name}.png"
            draw(scenario, at_s, before, runs, out)
            summary[scenario.name]["png"] = str(out)
    print(
        markdown_table(
            [
                "scenario",
                "algorithm",
                "rounds",
                "result",
                "splits",
                "children created",
                "bundles",
                "heaviest child",
                "heaviest bundle",
                "re-splits in day of growth",
                "bundles after day",
            ],
            rows,
        )
    )
    print()
    print("Targets for balanced_flow_divide (per scenario):\n")
    print(
        markdown_table(
            [
                "scenario",
                "max load at start",
                "end state in one round",
                "no more new bundles than any Pulsar algorithm",
                "fewer re-splits in the day",
                "fewest bundles after the day",
            ],
            [
                [
                    name,
                    _pct(s["max_initial_ratio"]),
                    _yes(s["targets"]["one_round"]),
                    _bundles_verdict(s["targets"]),
                    _resplits_verdict(
                        s["targets"],
                        s["algorithms"][SplitAlgorithm.BALANCED_FLOW_DIVIDE.value]["growth_splits"],
                    ),
                    _yes(s["targets"]["fewest_bundles_after_day"]),
                ]
                for name, s in summary.items()
            ],
        )
    )
    print()
    print_result({"benchmark": "split_quality", "scenarios": summary})
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


if __name__ == "__main__":
    raise SystemExit(main())
