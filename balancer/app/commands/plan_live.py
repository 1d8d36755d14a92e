"""`pulsar-balancer plan` against live clusters: samples, layouts and offload points, all GETs.

Its samples are rounds of the collector's (`balancer.collector.rounds.RoundRunner`, the
fetch `balancer.collector.admin.fetch_broker_stats`): one code path polls the brokers for
`run`, `collect` and `plan`, and a hung broker costs a round its deadline, not `plan` the
admin client's whole timeout per sample.

It plans what it can. A cluster that cannot be read (its brokers not listed, a broker-stats
poll failing or not answered by the round's deadline, a layout read failing) is left out
whole and named in `LivePlan.errors`: a plan of part of its brokers would be a partial
picture shown as whole. The other clusters are planned. A topic or namespace deleted
between two calls (404 where the broker-stats snapshot still listed it: normal on a real
cluster) is a `vanished` skip, no error.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from balancer.app.commands.plan_moves import (
    MOVES_OFF_NOTE,
    MovesPlan,
    plan_board,
    plan_moves,
    reads_load_reports,
)
from balancer.app.commands.plan_output import OffloadPoint
from balancer.app.config import BalancerConfig
from balancer.collector.admin import configure_brokers, fetch_broker_stats, listed_targets
from balancer.collector.rounds import (
    FetchResult,
    RoundRunner,
    RoundTimeout,
    fixed_targets,
    round_wait_s,
)
from balancer.collector.targets import Target
from balancer.controller.offload_point import default_offload_point
from balancer.core.planning import Plan, PlannedSkip, TopicSample, make_plan, window_loads

if TYPE_CHECKING:  # the admin client is imported when a cluster is asked
    from balancer.controller.broker_board import BrokerLoadBoard
    from balancer.core.broker_load import BrokerLoadReport
    from balancer.core.decisions import OffloadDecision
    from balancer.pulsar.client import PulsarPeerGroup
    from balancer.pulsar.errors import PulsarAdminError
    from balancer.pulsar.models import BrokerTopicStats

_T = TypeVar("_T")

NO_POINT = "no ledger to offload above the threshold"
VANISHED = "vanished"  # PlannedSkip.reason of a topic or namespace deleted between two calls


class LivePlan(NamedTuple):
    plan: Plan
    points: dict[str, OffloadPoint]
    errors: dict[str, str]  # cluster -> why it was not read (no credentials), in config order
    moves: MovesPlan | None = None  # the bundle moves between brokers (None: not planned)


class _Vanished(Exception):
    """A topic's offload status or internalStats answered 404: it was deleted."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def live_plan(
    config: BalancerConfig,
    *,
    samples: int,
    interval_s: float,
    sleep: Callable[[float], None],
    allows: Callable[[str], bool],
    layouts: dict[tuple[str, str], tuple[int, ...]] | None = None,
    drain: frozenset[str] = frozenset(),
) -> LivePlan:
    """Poll, plan and find each offload's point; every request is a GET.

    With `layouts`, each namespace's bundle boundaries as read go there ((cluster,
    namespace) -> boundaries: what `plan --save` records).

    `drain`: broker ids to empty (`plan --drain`).

    Raises ValueError (one line naming every cluster and why) when no cluster could be read,
    or when a broker of `drain` is no broker of the clusters read.
    """
    from balancer.app.pulsar_wiring import peer_group_from_config
    from balancer.pulsar.errors import NotFoundError, PulsarAdminError

    errors: dict[str, str] = {}
    load_errors: dict[str, str] = {}  # cluster -> why its broker loads were not read
    vanished: list[PlannedSkip] = []
    board = plan_board(config)
    with peer_group_from_config(config) as admin:
        problems = configure_brokers(config.clusters, admin)
        if problems:
            raise ValueError("; ".join(problems))
        taken = take_samples(
            admin,
            config,
            samples=samples,
            interval_s=interval_s,
            sleep=sleep,
            errors=errors,
            board=board,
            load_errors=load_errors,
        )
        if len(errors) == len(config.clusters):
            raise ValueError("; ".join(errors.values()))
        bundles = window_loads(taken)
        counts = {}
        for cluster, namespace in sorted({(b.cluster, b.namespace) for b in bundles}):
            if cluster in errors:
                continue
            try:
                layout = _ask(cluster, functools.partial(admin.get_bundles, namespace))
            except NotFoundError as exc:
                vanished.append(PlannedSkip(cluster, namespace, "", VANISHED, (), _what(exc)))
                continue
            except (PulsarAdminError, ValueError) as exc:
                errors[cluster] = _explain(cluster, exc)
                continue
            counts[(cluster, namespace)] = layout.num_bundles
            if layouts is not None:
                layouts[(cluster, namespace)] = layout.boundaries
        gone = {(s.cluster, s.namespace) for s in vanished}
        bundles = [
            b for b in bundles if b.cluster not in errors and (b.cluster, b.namespace) not in gone
        ]
        if len(errors) == len(config.clusters):
            raise ValueError("; ".join(errors.values()))
        now_ms = int(time.time() * 1000)
        plan = make_plan(
            bundles,
            thresholds=config.thresholds_model(),
            detection=config.detection_settings(),
            allows=allows,
            now_ms=now_ms,
            bundle_counts=counts,
        )
        moves = MovesPlan(note=MOVES_OFF_NOTE)
        if board is not None:
            from balancer.app.marks_read import read_marks

            # The marks `run` acts on: bounded (Kafka away or absent: "unknown", no wait).
            marks = read_marks(config)
            planned = [c.name for c in config.clusters if c.name not in errors]
            moves = plan_moves(
                config,
                admin,
                board,
                bundles,
                clusters=planned,
                splits=plan.splits,
                window_end_ms=plan.window_end_ms,
                now_ms=now_ms,
                allows=allows,
                errors=load_errors,
                drain=drain,
                marked=marks.draining,
                rollout_order_of=marks.rollout_order,
            )
            moves = dataclasses.replace(
                moves,
                marked={c: tuple(sorted(marks.draining(c))) for c in planned if marks.draining(c)},
                marks_note=marks.note,
                rolling={c: marks.rollout_order(c) for c in planned if marks.rollout_order(c)},
            )
        points: dict[str, OffloadPoint] = {}
        for offload in plan.offloads:
            try:
                points[offload.decision_id] = _offload_point(admin, offload)
            except _Vanished as exc:
                vanished.append(
                    PlannedSkip(
                        offload.cluster, offload.namespace, offload.topic, VANISHED, (), exc.detail
                    )
                )
            except (PulsarAdminError, ValueError) as exc:
                errors[offload.cluster] = _explain(offload.cluster, exc)
    # broker-stats' storageSize still counts offloaded ledgers: a topic whose BookKeeper
    # bytes are under its threshold (no point to offload up to) is no proposal, as `run`'s
    # BookKeeper check decides nothing for it.
    moved = {d for d, p in points.items() if p.message_id is not None or p.note != NO_POINT}
    plan = dataclasses.replace(
        plan,
        offloads=tuple(o for o in plan.offloads if o.decision_id in moved),
        skipped=(*plan.skipped, *vanished),
    )
    ordered = {c.name: errors[c.name] for c in config.clusters if c.name in errors}
    moves = dataclasses.replace(
        moves, errors={c: e for c, e in moves.errors.items() if c not in ordered}
    )
    return LivePlan(plan, {d: p for d, p in points.items() if d in moved}, ordered, moves)


def take_samples(
    admin: PulsarPeerGroup,
    config: BalancerConfig,
    *,
    samples: int,
    interval_s: float,
    sleep: Callable[[float], None],
    errors: dict[str, str] | None = None,
    board: BrokerLoadBoard | None = None,
    load_errors: dict[str, str] | None = None,
) -> list[TopicSample]:
    """`samples` rounds of broker-stats of every broker of every cluster, the brokers chosen
    as `run` and `collect` choose them (`balancer.collector.admin.polling_plan`), each round
    run as the collector runs its own (`balancer.collector.rounds.RoundRunner`: the brokers
    of a cluster asked at once, at most `collector.max_parallel_per_cluster`, and the round
    over at its deadline, `collector.interval_s`, whatever still runs).

    With `errors`, a cluster that fails (its brokers not listed, one poll failing or not
    answered by the round's deadline) is recorded there (cluster -> why) and its samples
    left out; without, the first failure raises.

    With `board`, each broker poll is recorded there as the collector records it for `run`:
    the bundles its broker-stats listed and its load report (None when the broker gives
    none: its load is then derived from its bundles). A cluster whose load reports cannot
    be read at all (401, no answer) goes to `load_errors` and gets no moves.
    """
    failed: dict[str, str] = {}
    targets, list_errors = listed_targets(config.clusters, admin)
    for cluster, exc in list_errors.items():
        failed[cluster] = _explain(cluster, exc)
    wait_s = round_wait_s(config.collector.interval_s)
    reads_loads = board is not None and reads_load_reports(config)
    rounds: RoundRunner[_Polled] = RoundRunner(
        lambda target: _fetch(admin, target, reads_loads=reads_loads, load_errors=load_errors),
        clock_ms=lambda: int(time.time() * 1000),
        monotonic=time.monotonic,
        max_parallel_per_cluster=config.collector.max_parallel_per_cluster,
    )
    taken: dict[str, list[TopicSample]] = {}
    for i in range(samples):
        if i:
            sleep(interval_s)
        asked = [t for t in targets if t.cluster not in failed]
        by_cluster: dict[str, list[Target]] = {}
        for target in asked:
            by_cluster.setdefault(target.cluster, []).append(target)
        deadline = time.monotonic() + wait_s
        results = {
            r.target: r
            for r in rounds.run(
                {c: fixed_targets(ts) for c, ts in by_cluster.items()}, deadline=deadline
            )
        }
        for target in asked:  # in listed order: the output is the same whoever answers first
            if target.cluster in failed:
                continue
            result = results[target]
            try:
                polled = _polled(result, wait_s)
            except Exception as exc:  # PulsarAdminError, a wrong shape (ValueError), a timeout
                if errors is None:
                    raise
                failed[target.cluster] = _explain(target.cluster, exc)
                continue
            samples_of = _samples(target, result.poll_ms, polled.stats)
            taken.setdefault(target.cluster, []).extend(samples_of)
            if board is not None:
                _record_broker(target, result.poll_ms, samples_of, polled, board, load_errors)
    if failed and errors is None:
        raise ValueError(next(iter(failed.values())))
    if errors is not None:
        errors.update(failed)
    return [s for cluster, items in taken.items() if cluster not in failed for s in items]


class _Polled(NamedTuple):
    """One broker's answers in a round: its broker-stats, and its load report (None: not
    asked, or the broker gives none) or why it could not be read."""

    stats: BrokerTopicStats
    report: BrokerLoadReport | None = None
    load_error: Exception | None = None


def _fetch(
    admin: PulsarPeerGroup,
    target: Target,
    *,
    reads_loads: bool,
    load_errors: dict[str, str] | None,
) -> _Polled:
    """What a round asks one broker (on the round's thread): its broker-stats through the
    collector's own fetch, and its load report as `balancer.collector.admin.admin_fetch`
    reads it for `run`."""
    from balancer.pulsar.broker_admin import LoadReportUnavailableError

    stats = _ask(target.cluster, lambda: fetch_broker_stats(admin, target))
    broker = target.broker
    if not reads_loads or broker is None:
        return _Polled(stats)
    if load_errors is not None and target.cluster in load_errors:
        return _Polled(stats)  # no load of this cluster is known: not asked again
    try:
        report = _ask(target.cluster, lambda: admin.load_report(target.cluster, broker))
    except LoadReportUnavailableError:  # the extensible load manager: from its bundles
        return _Polled(stats)
    except Exception as exc:  # 401/403, no answer: said by the caller
        return _Polled(stats, load_error=exc)
    return _Polled(stats, report)


def _polled(result: FetchResult[_Polled], wait_s: float) -> _Polled:
    """A round's answer of one broker, or raise why there is none."""
    if result.answer is not None:
        return result.answer
    if isinstance(result.error, RoundTimeout):
        raise RoundTimeout(
            f"cluster {result.target.cluster}: broker {result.target.label} timed out: "
            f"{result.error} (the round's deadline: {wait_s:g} s, collector.interval_s)"
        )
    raise result.error or ValueError(f"cluster {result.target.cluster}: no answer")


def _samples(target: Target, poll_ms: int, stats: BrokerTopicStats) -> list[TopicSample]:
    """One broker's broker-stats as samples (the collector's event conversion)."""
    say_rejected(stats, str(target))
    return [
        TopicSample(
            entry.namespace,
            entry.bundle,
            entry.stats.to_event(
                cluster=target.cluster,
                topic=entry.topic,
                timestamp_ms=poll_ms,
                broker=target.broker,
            ),
        )
        for entry in stats
    ]


def _record_broker(
    target: Target,
    poll_ms: int,
    polled: list[TopicSample],
    answer: _Polled,
    board: BrokerLoadBoard,
    load_errors: dict[str, str] | None,
) -> None:
    """One broker's poll on the board, with its load report when it gives one."""
    broker = target.broker
    if broker is None or (load_errors is not None and target.cluster in load_errors):
        return
    if answer.load_error is not None:  # no load of this cluster is known
        if load_errors is None:
            raise answer.load_error
        why = _explain(target.cluster, answer.load_error)
        load_errors[target.cluster] = f"{why} (its load report)"
        return
    board.record_poll(
        target.cluster,
        broker,
        poll_ms=poll_ms,
        report=answer.report,
        owned_bundles=frozenset(f"{s.namespace}/{s.bundle}" for s in polled),
    )


def _ask(cluster: str, call: Callable[[], _T]) -> _T:
    from balancer.pulsar.errors import PulsarAdminError
    from balancer.pulsar.routing import routed_to

    try:
        with routed_to(cluster):  # Pulsar answers these locally: ask where the stats came from
            return call()
    except PulsarAdminError as exc:
        if exc.cluster is None:
            exc.cluster = cluster
        raise
    except ValueError as exc:  # an answer of the wrong shape
        raise ValueError(f"cluster {cluster}: {exc}") from None


def _explain(cluster: str, exc: Exception) -> str:
    """One line naming the cluster and why it was not read."""
    from balancer.pulsar.errors import PulsarAdminError

    if isinstance(exc, PulsarAdminError):
        if exc.cluster is None:
            exc.cluster = cluster
        return _describe(exc)
    text = str(exc) if isinstance(exc, ValueError | RoundTimeout) else type(exc).__name__
    return text if text.startswith(f"cluster {cluster}: ") else f"cluster {cluster}: {text}"


def _describe(exc: PulsarAdminError) -> str:
    # The client's URLs and messages never carry credentials.
    if exc.status is None:  # no answer: the client's message names the request and cause
        return f"cluster {exc.cluster}: {exc}"
    where = f" {exc.method} {exc.url}" if exc.url else ""
    return f"cluster {exc.cluster}:{where}: HTTP {exc.status} {exc.reason or exc}".rstrip()


def _what(exc: PulsarAdminError) -> str:
    where = f"{exc.method} {exc.url}" if exc.url else "a read"
    return f"deleted between two calls: {where} answered 404"


def _offload_point(admin: PulsarPeerGroup, offload: OffloadDecision) -> OffloadPoint:
    """The controller's own checks before an offload: status, then the size rule."""
    from balancer.pulsar.errors import NotFoundError
    from balancer.pulsar.models import OffloadState

    try:
        status = _ask(offload.cluster, lambda: admin.offload_status(offload.topic))
        if status.state is OffloadState.RUNNING:
            return OffloadPoint(None, "an offload is already running")
        stats = _ask(offload.cluster, lambda: admin.internal_stats(offload.topic))
    except NotFoundError as exc:  # the stats snapshot outlived the topic
        raise _Vanished(_what(exc)) from None
    point = default_offload_point(stats, offload.threshold_bytes)
    if point is None:
        return OffloadPoint(None, NO_POINT)
    return OffloadPoint(point.to_json(), f"offload every ledger before {point.ledger_id}")


def say_rejected(stats: BrokerTopicStats, where: str) -> None:
    """Malformed topic entries are left out of the plan: say which, on stderr (stdout is
    the plan alone)."""
    for entry in stats.rejected:
        print(
            f"plan: {where}: topic {entry.topic} left out ({entry.reason.value}: {entry.detail})",
            file=sys.stderr,
            flush=True,
        )
