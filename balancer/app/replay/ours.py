"""`ours`: the balancer's own decision code, fed each closed window as `run` feeds it.

Nothing of `run`'s decision path is copied: the handler is `run`'s own
(`balancer.app.controller_wiring.build_handler` from the config: detection, split, offload,
the move planner, the controller's allow/deny lists, rate limits, breaker, journal,
cooldowns and grace periods), and each window's `BatchReport` is made by `run`'s own
foreachBatch code (`streaming.driver.batch.BatchProcessor.report`: the bundle roll-up with
the layouts in force, the per-topic rows of the bundles near a limit, the offload
candidates) over the window's closed rows held in memory (`MemoryClosedWindows`). What
differs is what it talks to and when:

- Pulsar is `ReplayAdmin` over `ours`' own layout (`balancer.app.replay.ours_admin`);
- the clock is the recording's event time: a window is handled at its end plus
  `handle_delay_ms` (by default half a slide: `run` handles a window a batch or two after
  its round's marker, within the next slide), so cooldowns, grace periods and rate limits
  count event time;
- the broker board (the move planner's broker loads) is fed the recorded load reports of
  each round, corrected for the bundles whose owner in `ours`' layout differs from the
  recorded one (`corrected_report`, by the rule `balancer.core.replay.correction` corrects
  the other policies' reports by): where the layouts agree, the planner reads exactly the
  reports `run` read.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import broker_board, build_handler
from balancer.app.replay.ours_admin import OursLayout, ReplayAdmin
from balancer.app.replay.windows import ClosedWindow
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.controller.outcome import Outcome
from balancer.core.broker_load import BrokerLoadReport
from balancer.core.decisions import DecisionKind, OffloadDecision, SplitDecision
from balancer.core.limits import max_ratio
from balancer.core.load import BundleLoad
from balancer.core.moves.model import MoveDecision
from balancer.core.replay import correction
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.result import POLICY_OURS, ActionKind, ReplayAction, WindowSample
from balancer.core.results import ActionResult
from streaming.driver.batch import BatchObservations, BatchProcessor
from streaming.driver.closed_windows import HEAD_COLUMNS, ClosedWindows, Task
from streaming.driver.deadletters import DeadLetter
from streaming.driver.rollup import decode_known
from streaming.stage.partials import Layouts, StageLayouts, close_partials
from streaming.stage.windows import WindowSpec

_DONE = (ActionResult.APPLIED, ActionResult.LANDED_ELSEWHERE)


class ReplayClock:
    """The controller's clock, set to event time by the replay (never the wall clock)."""

    def __init__(self) -> None:
        self._ms = 0

    def set(self, now_ms: int) -> None:
        self._ms = max(self._ms, now_ms)  # a clock never goes back

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._ms / 1000


class _NoDeadLetters:
    """A replay writes no dead letters: the stream counts them by reason."""

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        return None

    def close(self) -> None:
        return None


class MemoryClosedWindows(ClosedWindows):
    """One window's closed rows, held in memory, read by `run`'s driver code."""

    def __init__(
        self,
        rows: pa.Table,
        stage_layouts: StageLayouts | None = None,
        *,
        topic_table: Callable[[], pa.Table] | None = None,
    ) -> None:
        """`stage_layouts`: those the stage rolled the rows' `partials` up with, if any;
        `topic_table`: the rows' topics already decoded (`ClosedWindow.topic_table`)."""
        self._rows = rows
        self.stage_layouts = stage_layouts
        self._topic_table = topic_table

    def heads(self) -> pa.Table:
        return self._rows.select(list(HEAD_COLUMNS))

    def partials(
        self, window_end_ms: int, layouts: Layouts, min_storage_bytes: int | None
    ) -> pa.Table:
        """`run`'s partials rolled up over the whole window at once, from its topics as
        decoded for every policy: bundle partials are exact parts, so a bundle's merged
        load is the same whatever the grouping (`streaming.driver.rollup`), and one roll-up
        of 100,000 topics costs a quarter of four buckets' (issue 44). The per-bucket
        path (`partials_task`) where that would not keep its order of large topics."""
        rows = self._rows
        if self._topic_table is None or not _one_window_by_bucket(rows, window_end_ms):
            return super().partials(window_end_ms, layouts, min_storage_bytes)
        known = decode_known(rows.column("known").to_pylist())
        return close_partials(
            self._topic_table(), known, layouts, bucket=0, part=0,
            min_storage_bytes=min_storage_bytes,
        )  # fmt: skip

    def _run(self, window_end_ms: int, task: Task, schema: pa.Schema) -> pa.Table:
        rows = self._rows.filter(pc.equal(self._rows.column("window_end"), window_end_ms))
        batches = list(task(iter(rows.to_batches())))
        if not batches:
            return schema.empty_table()
        return pa.Table.from_batches(batches).cast(schema)


def _one_window_by_bucket(rows: pa.Table, window_end_ms: int) -> bool:
    """Whether `rows` are all of the window ending at `window_end_ms`, each bucket's closes
    together and every close with its topics and known topics: then the per-bucket path
    decodes its topics in the rows' order, as the whole window's decoding does."""
    if rows.num_rows == 0:
        return False
    ends = rows.column("window_end")
    if pc.min(ends).as_py() != window_end_ms or pc.max(ends).as_py() != window_end_ms:
        return False
    if rows.column("payload").null_count or rows.column("known").null_count:
        return False
    buckets = rows.column("bucket").to_numpy()
    changes = int(np.count_nonzero(buckets[1:] != buckets[:-1]))
    return changes + 1 == len(np.unique(buckets))


def cpu_costs(reports: Sequence[BrokerLoadReport]) -> dict[str, float]:
    """Per broker, cpu (percent of a core) per msg/s in + out it carried in the round (its
    newest report); under "" the cluster's average, for a broker that carried nothing."""
    return correction.cpu_costs(correction.newest_reports(reports))


def corrected_report(
    report: BrokerLoadReport,
    owned: frozenset[str],
    loads: Mapping[str, BundleLoad],
    *,
    recorded_owners: Mapping[str, str] | None = None,
    costs: Mapping[str, float] | None = None,
) -> BrokerLoadReport:
    """The recorded report as the broker would give it owning `owned`: the bundles it lost or
    gained in `ours`' layout (their newest windowed loads) moved off or onto it by the core's
    rule (`balancer.core.replay.correction`, as Pulsar's policies' reports are corrected),
    their cpu at the cost per msg/s of the broker that carried them in the recording
    (`recorded_owners`, `costs` from `cpu_costs`; a bundle it lost at its own cost).
    Unchanged when the broker owns what it owned in the recording."""
    recorded = frozenset(report.bundles)
    if owned == recorded:
        return report
    owners = recorded_owners or {}
    cost = dict(costs or {})
    cost.setdefault("", 0.0)
    deltas: dict[str, correction.LoadDelta] = {}
    broker = report.broker
    for name in sorted(owned - recorded):
        if name in loads:
            correction.move_load(deltas, loads[name], owners.get(name), broker, cost)
    for name in sorted(recorded - owned):
        if name in loads:
            correction.move_load(deltas, loads[name], broker, None, cost)
    delta = deltas.get(broker, correction.LoadDelta())
    return correction.corrected_report(report, delta, owned)


def replay_config(config: BalancerConfig, workdir: Path) -> BalancerConfig:
    """`run`'s config for the replay: applying (to `ours`' own layout), with its journal
    and audit log in the replay's work directory."""
    controller = config.controller.model_copy(
        update={
            "mode": "apply",
            "journal_path": workdir / "journal.sqlite3",
            "audit_log_path": workdir / "audit.jsonl",
        }
    )
    return config.model_copy(update={"controller": controller})


class OursPolicy:
    """`ours` as a replay policy: `observe` each recorded round, `step` each closed window."""

    name = POLICY_OURS

    def __init__(
        self,
        config: BalancerConfig,
        *,
        workdir: Path | None = None,
        handle_delay_ms: int | None = None,
        settings_from: str = "the default",
    ) -> None:
        """`settings_from`: where the config came from, for the report (a file's path)."""
        self._tmp = None if workdir is not None else tempfile.TemporaryDirectory(prefix="ours-")
        work = workdir or Path(self._tmp.name if self._tmp else ".")
        work.mkdir(parents=True, exist_ok=True)
        self.config = replay_config(config, work)
        spark = config.spark
        self.spec = WindowSpec(spark.window_s, spark.slide_s, spark.watermark_s)
        self.handle_delay_ms = (
            handle_delay_ms if handle_delay_ms is not None else spark.slide_s * 500
        )
        self.layout = OursLayout()
        self.admin = ReplayAdmin(self.layout)
        self.clock = ReplayClock()
        self.board: BrokerLoadBoard | None = broker_board(self.config)
        self.handler = build_handler(self.config, self.admin, clock=self.clock, board=self.board)
        self._outcomes: list[Outcome] = []
        self.handler.controller.add_listener(lambda outcome: self._outcomes.append(outcome))
        self.processor = BatchProcessor(
            spec=self.spec, handler=self.handler, layouts=self.handler.layouts,
            dead_letters=_NoDeadLetters(), clock_ms=self.clock.now_ms,
        )  # fmt: skip
        self._bundles: dict[str, BundleLoad] = {}  # `cluster/name` -> newest windowed load
        self._batch = 0
        self.description = (
            "pulsar-balancer's own decisions (detection, splits, offloads, moves, the "
            f"controller's limits) with {settings_from} settings"
        )

    def observe(self, context: RoundContext) -> None:
        """A recorded round: `ours`' layout learns new namespaces and brokers, and the board
        gets each broker's report as it would read with `ours`' owners."""
        self.layout.observe(context)
        if self.board is None:
            return
        loads = {
            name.split("/", 1)[1]: load
            for name, load in self._bundles.items()
            if name.startswith(f"{context.cluster}/")
        }
        owners = {name: r.broker for r in context.reports for name in r.bundles}
        costs = cpu_costs(context.reports)
        for report in context.reports:
            owned = self.layout.owned(context.cluster, report.broker)
            fixed = corrected_report(report, owned, loads, recorded_owners=owners, costs=costs)
            self.board.record_poll(
                context.cluster, report.broker, poll_ms=context.round_ms, report=fixed,
                owned_bundles=owned,
            )  # fmt: skip

    def handle_at_ms(self, window_end_ms: int) -> int:
        return window_end_ms + self.handle_delay_ms

    def stage_layouts(self) -> StageLayouts | None:
        """The layouts `run`'s driver would hand the stage now: those its batch code rolled
        the last handled window up with (`BatchProcessor` keeps them for its next batch;
        read here from another thread, as the stream starts a micro-batch)."""
        return self.processor.stage_layouts

    def step(self, window: ClosedWindow) -> tuple[list[ReplayAction], WindowSample]:
        """`run`'s handling of one closed window; the actions applied to `ours`' layout."""
        self.clock.set(self.handle_at_ms(window.end_ms))
        self._batch += 1
        if window.topics:
            observed = BatchObservations((), (), window.end_ms, window.end_ms)
            closed = MemoryClosedWindows(
                window.rows, window.stage_layouts, topic_table=window.topic_table
            )
            report = self.processor.report(self._batch, closed, observed, time.monotonic())
            for bundle in report.bundles:
                self._bundles[f"{bundle.cluster}/{bundle.namespace}/{bundle.bundle}"] = bundle
            for _, topic in report.large_topics:
                self.layout.bookkeeper_bytes.setdefault(
                    topic.topic, topic.storage_size - topic.offloaded_storage_size
                )
            self.handler.handle(report)
        outcomes, self._outcomes = self._outcomes, []
        actions = [a for o in outcomes if (a := self._action(o)) is not None]
        return actions, self._sample(window.end_ms)

    def _action(self, outcome: Outcome) -> ReplayAction | None:
        decision = outcome.decision
        if decision is None or outcome.result not in _DONE:
            return None
        at_ms = self.clock.now_ms()
        if isinstance(decision, SplitDecision):
            points = [decision.bundle.lower, *decision.boundaries, decision.bundle.upper]
            children = tuple(f"0x{lo:08x}_0x{hi:08x}" for lo, hi in itertools.pairwise(points))
            load = self._bundles.get(f"{decision.cluster}/{decision.namespace}/{decision.bundle}")
            unloaded = bool(outcome.pulsar.get("unload", self.config.controller.unload_after_split))
            if decision.unload_children is not None:
                unloaded = decision.unload_children
            return ReplayAction(
                at_ms=at_ms, cluster=decision.cluster, kind=ActionKind.SPLIT,
                subject=decision.bundle.key(decision.namespace), children=children,
                sessions_moved=load.session_count if (load and unloaded) else 0,
                reason=decision.reason.value,
            )  # fmt: skip
        if isinstance(decision, MoveDecision):
            destination = decision.destination
            if outcome.result is ActionResult.LANDED_ELSEWHERE:
                found = self.layout.owners.get(
                    (decision.cluster, decision.bundle.key(decision.namespace))
                )
                destination = found or destination
            return ReplayAction(
                at_ms=at_ms, cluster=decision.cluster, kind=ActionKind.MOVE,
                subject=decision.bundle.key(decision.namespace), source_broker=decision.source,
                destination_broker=destination,
                sessions_moved=outcome.sessions_moved or decision.sessions,
                reason=decision.reason.value,
            )  # fmt: skip
        if isinstance(decision, OffloadDecision) and outcome.kind is DecisionKind.OFFLOAD:
            return ReplayAction(
                at_ms=at_ms, cluster=decision.cluster, kind=ActionKind.OFFLOAD,
                subject=decision.topic, reason=outcome.reason,
            )  # fmt: skip
        return None

    def _sample(self, window_end_ms: int) -> WindowSample:
        loads: dict[str, float] = {}
        mover = self.handler.mover
        if mover is not None:
            for cluster, cluster_loads in mover.last_loads.items():
                for broker in cluster_loads.brokers:
                    loads[f"{cluster}/{broker.broker}"] = broker.load_ratio
        over: dict[str, float] = {}
        thresholds = self.handler.thresholds
        for name, bundle in self._bundles.items():
            if bundle.window_end_ms != window_end_ms:
                continue
            ratio = max_ratio(bundle, thresholds.policy_for(bundle.namespace).limits)
            if ratio >= 1.0:
                over[name] = ratio
        bundles = sum(layout.num_bundles for layout in self.layout.layouts.values())
        return WindowSample(window_end_ms, loads, over, bundles)

    def close(self) -> None:
        self.handler.close(wait_s=1.0)
        if self._tmp is not None:
            self._tmp.cleanup()
