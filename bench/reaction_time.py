"""Benchmark 2, reaction time: from the first overloaded stats sample to the split applied,
and to every bundle under threshold, in simulated time (nothing sleeps).

Both schedules read the same stats samples: the simulator's traffic model sampled every
`statsUpdateFrequencyInSecs` (60 s). Every scenario is preceded by a calm warm-up (10
simulated minutes at 30 % of its opening load, under every threshold in the scenario
files), so both schedules are warm and the overload starts at a known sample, as a real one
would after a quiet spell. Thresholds are Pulsar's defaults. A bundle holding a single
topic that is over threshold on its own cannot be helped by any split; "all under
threshold" means every bundle is under threshold or is such a lone topic, and stays so to
the end of the horizon (the last 10 minutes at least).

Two settings of our pipeline are modelled by default: what `run` does by default (the
window defaults of `balancer.app.config.SparkConfig`, the only ones, which the deployed app
passes to the stream, closed by the collector's round markers when `collector.round_markers`
is on, as by default) and the defaults before issue 36 (`BEFORE_ISSUE_36`: a 120 s window
sliding every 60 s, closed by a 60 s watermark, a 30 s trigger).

Our pipeline (modelled on the collector, `balancer/collector/service.py`, the streaming job,
`streaming/stage/windows.py` and `streaming/driver/batch.py`, and the real detector,
`balancer.core.detect.detect`):
- the collector's round at t (on the interval's grid) is one stats sample stamped t; with
  round markers it is followed by a marker promising nothing before t + interval;
- per-topic sliding windows of `window_s`, a new one every `slide_s`; a topic's load in a
  window is the average of its samples there. A window closes once the watermark passes its
  end: with a marker the watermark is the marker's time (t + interval), else the newest
  event time less `watermark_s` (`Schedule.newest_end_s`);
- Spark moves the watermark at the end of the batch that read the sample (or marker) and
  expires the windows in the next batch, a trigger later; the first batch may come a whole
  trigger after the sample: the split is applied at t + 2 triggers (`Schedule.decided_s`,
  the worst phase; the round's own seconds are not counted, as Pulsar's checks have no
  phase lag here either);
- each batch rolls up only the NEWEST closed window, with the namespaces' current layouts,
  and hands it to `detect`: a split on the 3rd consecutive complete window over threshold,
  at most 10 splits per window, a 60 s cooldown per namespace, the balanced_flow_divide split
  in one step (fill factor 0.8);
- the controller applies the decision at once (the admin call takes milliseconds), unless
  the bundle is gone (a stale decision, skipped) or its rate limits (10 splits a minute
  per cluster, 3 per namespace) are used up.

Pulsar's extensible load manager (the schedule its split strategy follows):
- a check every `loadBalancerSplitIntervalMinutes` (1 min) on the latest stats (modelled as
  taken at the same instant as the sample: no phase lag, Pulsar's best case);
- a bundle is split when it has been over threshold in more than 3 consecutive checks (the
  4th), its counter then starts again; children start from 0; at most 10 splits per check
  and cluster; never a bundle with < 2 topics or past 128 bundles per namespace;
- one boundary per split: its default range_equally_divide, or flow_or_qps_equally_divide
  limited to its first boundary (the extensible load manager rejects more than one, Pulsar
  issue 22254; this row is the optimistic reading that it took the first).

Built-in cases (`bench.reaction_scenarios`, after the scenario files; `--no-built-in`
leaves them out): a modest overload just over the limit, a flash crowd, a slow ramp, two
namespaces in two clusters, and two transients for which the right reaction is no split at
all (splits are never undone): a namespace doubling for one stats sample, and for two.

Run: `.venv/bin/python -m bench.reaction_time` (`--help` for options). Prints a markdown
table, the machine, and a last line `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from balancer.app.config import CollectorConfig, SparkConfig
from balancer.core.detect import DetectionSettings, DetectorState, detect
from balancer.core.load import BundleLoad
from balancer.core.replay.pulsar_splits import HIT_COUNT_THRESHOLD as PULSAR_HIT_COUNT
from balancer.core.replay.pulsar_splits import ExtensibleSplitStrategy
from balancer.core.split import SplitAlgorithm, SplitOptions, compute_split
from balancer.core.thresholds import Thresholds
from balancer.sim.scenarios import load_scenario, parse_scenario
from bench.common import header, markdown_table, print_result, scenario_files
from bench.reaction_model import (
    LIMITS,
    SETTLE_MARGIN_S,
    Sample,
    Sampler,
    Settling,
    Timeline,
    bundle_load,
    over_state,
    record_split,
    window_loads,
)
from bench.reaction_scenarios import BUILT_IN

FloatArray = npt.NDArray[np.float64]
CONTROLLER_SPLITS_PER_MINUTE = 10  # per cluster (the controller's default rate limits)
CONTROLLER_SPLITS_PER_MINUTE_PER_NAMESPACE = 3
# Batches from the one that reads a sample (or its round's marker) to the one that emits
# the windows it closed (`Schedule.decided_s`).
CLOSE_TRIGGERS = 2
# The second setting modelled by default: the defaults before issue 36 (a 120 s window
# sliding every 60 s, closed by a 60 s watermark, a 30 s trigger, no round markers).
BEFORE_ISSUE_36 = (120, 60, 60, 30, False)


def default_schedule() -> tuple[int, int, int, int, bool]:
    """What `run` does by default: the config's window defaults, and round markers when the
    collector sends them (`collector.round_markers`)."""
    spark = SparkConfig()
    marker = CollectorConfig().round_markers
    return (spark.window_s, spark.slide_s, spark.watermark_s, spark.trigger_interval_s, marker)


def _spec(schedule: tuple[int, int, int, int, bool]) -> str:
    text = "/".join(str(x) for x in schedule[:4])
    return text + "/marker" if schedule[4] else text


@dataclass(frozen=True)
class Schedule:
    """Our pipeline's window schedule: lengths in seconds, and whether the collector's round
    markers close windows (`marker`) or only the watermark does."""

    window_s: int
    slide_s: int
    watermark_s: int
    trigger_s: int
    marker: bool

    @property
    def label(self) -> str:
        close = "round marker" if self.marker else f"watermark {self.watermark_s} s"
        return (
            f"ours: window {self.window_s} s, slide {self.slide_s} s, closed by {close}, "
            f"trigger {self.trigger_s} s"
        )

    def newest_end_s(self, sample_s: float, interval_s: float) -> float:
        """The end of the newest window closed once the sample of `sample_s` is in."""
        if self.marker:
            # The round's marker promises no event before the next round (sample + interval):
            # it moves the watermark there, and every window ending by then closes.
            return math.floor((sample_s + interval_s) / self.slide_s) * self.slide_s
        # Else the watermark is the newest event time less the allowed lateness.
        return math.floor((sample_s - self.watermark_s) / self.slide_s) * self.slide_s

    def decided_s(self, sample_s: float) -> float:
        """When the batch that emits those windows runs (the split is applied then).

        The batch reading the sample (or its round's marker) moves the watermark; Spark
        expires the windows' timers against it only in the next batch, a trigger later
        (`CLOSE_TRIGGERS`), and the first batch can come a whole trigger after the sample:
        the worst phase. The collection itself (milliseconds against the simulator) is not
        counted, as Pulsar's checks are modelled without phase lag.
        """
        return sample_s + CLOSE_TRIGGERS * self.trigger_s


def run_ours(
    sampler: Sampler,
    schedule: Schedule,
    *,
    stats_interval_s: float,
    horizon_s: float,
) -> Timeline:
    timeline = Timeline(schedule.label)
    settling = Settling(timeline, stats_interval_s)
    settings = DetectionSettings()
    thresholds = Thresholds()  # Pulsar's limits, balanced_flow_divide
    state = DetectorState()
    layouts = [ns.initial for ns in sampler.namespaces]
    samples: deque[Sample] = deque()
    last_end_s = -math.inf
    window_s = schedule.window_s
    recent: deque[tuple[float, str, str]] = deque()  # (time, cluster, namespace) of splits
    k = 0
    while True:
        t = k * stats_interval_s
        if timeline.first_over_s is not None and t > timeline.first_over_s + horizon_s:
            break
        if timeline.first_over_s is None and t > horizon_s * 4:
            break  # never overloaded in the look-ahead
        sample = Sample(t, sampler.rates(t))
        samples.append(sample)
        over, lone = over_state(sampler, layouts, sample)
        settling.observe(t, over, lone, before_splits=True)
        now = schedule.decided_s(t)
        # The batch closes every window ending at or before the watermark; the handler
        # rolls up only the newest of them.
        newest_end = schedule.newest_end_s(t, stats_interval_s)
        window = [s for s in samples if newest_end - window_s <= s.t_s < newest_end]
        if newest_end > last_end_s and window:
            last_end_s = newest_end
            bundles = window_loads(sampler, layouts, window, int(newest_end * 1000))
            counts = {
                (ns.cluster, ns.name): layouts[ns.index].num_bundles for ns in sampler.namespaces
            }
            result = detect(
                bundles=bundles,
                window_end_ms=int(newest_end * 1000),
                now_ms=int(now * 1000),
                thresholds=thresholds,
                settings=settings,
                state=state,
                bundle_counts=counts,
            )
            state = result.state
            for decision in result.splits:
                ns = next(n for n in sampler.namespaces if n.name == decision.namespace)
                layout = layouts[ns.index]
                if not layout.has(decision.bundle):
                    timeline.stale += 1
                    continue
                while recent and recent[0][0] <= now - 60:
                    recent.popleft()
                in_cluster = sum(1 for _, c, _ in recent if c == ns.cluster)
                in_ns = sum(1 for _, _, n in recent if n == ns.name)
                if (
                    in_cluster >= CONTROLLER_SPLITS_PER_MINUTE
                    or in_ns >= CONTROLLER_SPLITS_PER_MINUTE_PER_NAMESPACE
                ):
                    timeline.rate_limited += 1
                    continue
                layouts[ns.index], children = layout.split(decision.bundle, decision.boundaries)
                recent.append((now, ns.cluster, ns.name))
                record_split(timeline, now, len(children))
        while samples and samples[0].t_s < last_end_s - window_s:
            samples.popleft()  # no window still to be emitted can hold them
        if timeline.splits:
            over, lone = over_state(sampler, layouts, sample)
            settling.observe(now, over, lone, before_splits=False)
        k += 1
    timeline.finish((k - 1) * stats_interval_s, SETTLE_MARGIN_S)
    return timeline


def run_pulsar(
    sampler: Sampler,
    *,
    algorithm: SplitAlgorithm,
    check_interval_s: float,
    horizon_s: float,
    label: str,
) -> Timeline:
    """Pulsar's extensible split strategy (`balancer.core.replay.pulsar_splits`), one per
    cluster: the scenarios place no bundle on a broker, so a cluster is one broker's check."""
    timeline = Timeline(label)
    settling = Settling(timeline, check_interval_s)
    layouts = [ns.initial for ns in sampler.namespaces]
    by_name = {ns.name: ns for ns in sampler.namespaces}
    strategies: dict[str, ExtensibleSplitStrategy] = {}
    options = SplitOptions()  # Pulsar's defaults
    k = 0
    while True:
        t = k * check_interval_s
        if timeline.first_over_s is not None and t > timeline.first_over_s + horizon_s:
            break
        if timeline.first_over_s is None and t > horizon_s * 4:
            break
        sample = Sample(t, sampler.rates(t))
        over, lone = over_state(sampler, layouts, sample)
        settling.observe(t, over, lone, before_splits=True)

        def boundaries(load: BundleLoad, sample: Sample = sample) -> tuple[int, ...]:
            full = bundle_load(by_name[load.namespace], load.bundle, [sample], 0, with_topics=True)
            # The extensible load manager takes one boundary (issue 22254): the first.
            return compute_split(algorithm, load.bundle, full.topics, options).boundaries[:1]

        for cluster in sorted({ns.cluster for ns in sampler.namespaces}):
            members = [n for n in sampler.namespaces if n.cluster == cluster]
            loads = [
                bundle_load(ns, bundle, [sample], 0, with_topics=False)
                for ns in members
                for bundle in layouts[ns.index].bundles
            ]
            loads.sort(key=lambda b: (-b.msg_rate, b.namespace, b.bundle))
            counts = {ns.name: layouts[ns.index].num_bundles for ns in members}
            strategy = strategies.setdefault(cluster, ExtensibleSplitStrategy(limits=LIMITS))
            for choice in strategy.cycle(loads, counts, boundaries):
                ns = by_name[choice.load.namespace]
                layouts[ns.index], children = layouts[ns.index].split(
                    choice.load.bundle, choice.boundaries
                )
                record_split(timeline, t, len(children))
        if timeline.splits:
            over, lone = over_state(sampler, layouts, sample)
            settling.observe(t, over, lone, before_splits=False)
        k += 1
    timeline.finish((k - 1) * check_interval_s, SETTLE_MARGIN_S)
    return timeline


def main(argv: Sequence[str] | None = None) -> int:
    config_default = default_schedule()
    parser = argparse.ArgumentParser(
        prog="python -m bench.reaction_time",
        description=(
            "Benchmark 2: simulated time from the first overloaded stats sample to the split "
            "applied and to all bundles under threshold, our pipeline vs Pulsar's extensible "
            "load manager."
        ),
    )
    parser.add_argument(
        "scenarios", nargs="*", type=Path, help="scenario YAML files (default: conf/scenarios/*)"
    )
    parser.add_argument(
        "--horizon-min",
        type=float,
        default=60.0,
        help="simulated minutes to follow after the first overloaded sample (60)",
    )
    parser.add_argument(
        "--pipeline",
        action="append",
        metavar="W/S/WM/T[/marker]",
        help="window, slide, watermark and trigger seconds of our pipeline to model, "
        "'/marker' when the collector's round markers close the windows (repeatable; "
        f"default: the config defaults {_spec(config_default)} and the defaults before "
        f"issue 36 {_spec(BEFORE_ISSUE_36)})",
    )
    parser.add_argument(
        "--no-built-in",
        action="store_true",
        help="leave out the built-in cases (bench.reaction_scenarios: spikes that should not "
        "split, a modest overload, a flash crowd, a slow ramp, two clusters)",
    )
    parser.add_argument(
        "--warmup-min",
        type=float,
        default=10.0,
        help="calm simulated minutes before the scenario starts (10; 0 = none)",
    )
    parser.add_argument(
        "--calm",
        type=float,
        default=0.3,
        help="load during the warm-up, as a share of the scenario's opening load (0.3)",
    )
    args = parser.parse_args(argv)
    schedules: list[Schedule] = []
    for text in args.pipeline or [_spec(config_default), _spec(BEFORE_ISSUE_36)]:
        parts = text.split("/")
        marker = len(parts) == 5 and parts[4] == "marker"
        lengths = parts[:4]
        ok = len(parts) in (4, 5) and (len(parts) == 4 or marker)
        ok = ok and all(x.isdigit() for x in lengths)
        w, sl, wm, tr = (int(x) for x in lengths) if ok else (0, 0, 0, 0)
        if not ok or not (0 < sl <= w and w % sl == 0 and tr > 0):
            parser.error(f"--pipeline {text!r}: expected W/S/WM/T[/marker], slide dividing window")
        schedules.append(Schedule(w, sl, wm, tr, marker))
    horizon_s = args.horizon_min * 60.0

    print(header("Reaction time"))
    print(
        f"Warm-up: {args.warmup_min:g} min at {args.calm:g}x the opening load. "
        f"Stats every 60 s; our pipeline: hysteresis "
        f"{DetectionSettings().hit_count_threshold} complete windows, balanced_flow_divide; "
        f"Pulsar: 1-minute checks, split on the "
        f"{PULSAR_HIT_COUNT + 1}th consecutive check over threshold, one boundary per split.\n"
    )
    rows: list[list[object]] = []
    summary: dict[str, Any] = {}
    scenarios = [load_scenario(path) for path in args.scenarios or scenario_files()]
    if not args.no_built_in:
        scenarios.extend(parse_scenario(spec, source="built in") for spec in BUILT_IN)
    for scenario in scenarios:
        sampler = Sampler(scenario, warmup_s=args.warmup_min * 60.0, calm=args.calm)
        interval = scenario.broker.stats_update_interval_s or 60.0
        timelines = [
            run_ours(sampler, schedule, stats_interval_s=interval, horizon_s=horizon_s)
            for schedule in schedules
        ]
        for algorithm, label in (
            (SplitAlgorithm.RANGE_EQUALLY_DIVIDE, "Pulsar extensible: range_equally_divide"),
            (
                SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE,
                "Pulsar extensible: flow_or_qps (1st boundary)",
            ),
        ):
            timelines.append(
                run_pulsar(
                    sampler,
                    algorithm=algorithm,
                    check_interval_s=60.0,
                    horizon_s=horizon_s,
                    label=label,
                )
            )
        rows.extend(t.row(scenario.name, horizon_s) for t in timelines)
        summary[scenario.name] = {t.schedule: t.as_json() for t in timelines}
    print(
        markdown_table(
            [
                "scenario",
                "schedule",
                "first overloaded sample",
                "split applied",
                "all under threshold",
                "over-threshold bundle-minutes",
                "splits",
                "children",
            ],
            rows,
        )
    )
    print()
    print_result({"benchmark": "reaction_time", "scenarios": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
