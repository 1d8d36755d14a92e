"""`pulsar-balancer plan`'s bundle moves: each broker's load before and after, and the moves.

The broker polls `plan` takes (broker-stats ownership, and each broker's load report when it
gives one) go into a `BrokerLoadBoard`, and the moves come from the same `MovePlanner` that
`run` uses each window (`balancer.app.controller_wiring.move_planner`), so `plan` and `run`
agree. The grace period comes from the configured journal when it exists (opened read-only:
`plan` writes nothing); without it no bundle counts as moved lately.

A cluster whose broker loads or placement rules cannot be read is named in
`MovesPlan.errors` and gets no moves; the rest is planned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from balancer.app.commands.output import make_table
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import move_planner, no_draining
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.controller.journal import Journal
from balancer.controller.move_planning import ClusterLoads, PlacementReads
from balancer.controller.move_steps import ranges_in_flight
from balancer.core.decisions import SplitDecision
from balancer.core.load import BundleLoad
from balancer.core.moves.model import MoveDecision, MovePlan

log = logging.getLogger(__name__)

STATS_FILE_NOTE = (
    "Moves: not planned from a stats file (broker-stats has no broker loads; "
    "use --config to read the brokers' load reports)"
)
MOVES_OFF_NOTE = "Moves: off (moves.enabled is false)"


@dataclass(frozen=True, slots=True)
class ClusterMoves:
    """One cluster's broker loads (as the planner read them) and its move plan."""

    loads: ClusterLoads
    plan: MovePlan
    # Moves outside the controller's allow-list: `run` would decide them and skip them.
    denied: tuple[MoveDecision, ...] = ()

    @property
    def moves(self) -> tuple[MoveDecision, ...]:
        return tuple(m for m in self.plan.moves if m not in self.denied)


@dataclass(frozen=True, slots=True)
class MovesPlan:
    clusters: dict[str, ClusterMoves] = field(default_factory=dict)  # in config order
    errors: dict[str, str] = field(default_factory=dict)  # cluster -> why it has no moves
    note: str | None = None  # one line: why there are no moves at all (stats file, off)
    # The drain marks `run` acts on (cluster -> brokers marked draining), as read for this
    # plan; `marks_note` says "Drain marks: read" or why they are unknown (None: not asked).
    marked: dict[str, tuple[str, ...]] = field(default_factory=dict)
    marks_note: str | None = None
    # cluster -> the restart order of its roll in progress (`roll start`), as read for this
    # plan: a drain sends its bundles by it, as `run` does
    rolling: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def moves(self) -> list[MoveDecision]:
        return [m for c in self.clusters.values() for m in c.moves]


def plan_board(config: BalancerConfig) -> BrokerLoadBoard | None:
    """A board for `plan`'s polls (None: moves are off). It keeps every poll of the run."""
    if not config.moves.enabled:
        return None
    return BrokerLoadBoard(retain_ms=24 * 3600 * 1000)


def reads_load_reports(config: BalancerConfig) -> bool:
    return config.moves.enabled and config.moves.read_load_reports


def journal_last_moves(path: Path) -> tuple[Callable[[str], Mapping[str, int]], Journal | None]:
    """The journal's last moves per bundle, for the grace period; the journal is opened
    read-only and only when it exists (`plan` never creates it). Without it: none."""
    if str(path) == ":memory:" or not Path(path).is_file():
        return (lambda _cluster: {}), None
    try:
        journal = Journal.open_read_only(path)
        journal.last_moves("")  # a file that is no journal fails here, not mid-plan
    except Exception as exc:  # unreadable or not a journal: plan without the grace period
        log.warning("plan: journal %s cannot be read (%s): no grace period applied", path, exc)
        return (lambda _cluster: {}), None
    return journal.last_moves, journal


def plan_moves(
    config: BalancerConfig,
    admin: PlacementReads,
    board: BrokerLoadBoard,
    bundles: Sequence[BundleLoad],
    *,
    clusters: Sequence[str],
    splits: Sequence[SplitDecision],
    window_end_ms: int,
    now_ms: int,
    allows: Callable[[str], bool],
    errors: Mapping[str, str] | None = None,
    drain: frozenset[str] = frozenset(),
    marked: Callable[[str], frozenset[str]] = no_draining,
    rollout_order_of: Callable[[str], tuple[str, ...]] = lambda _cluster: (),
) -> MovesPlan:
    """Each cluster's moves, as `run`'s handler plans them for one window. `errors`: the
    clusters whose broker loads could not be read already (named, no moves). `drain`:
    broker ids to empty (`plan --drain`); one that is no broker of a cluster planned is a
    ValueError naming it. `marked`: cluster -> brokers marked draining for `run` (planned
    as draining too, so `plan` shows what `run` does). `rollout_order_of`: cluster -> the
    restart order of its roll in progress (a drain's destinations, as `run`'s)."""
    out = MovesPlan(errors=dict(errors or {}))
    last_moves, journal = journal_last_moves(config.controller.journal_path)
    try:
        planner = move_planner(
            config,
            admin,
            board,
            last_moves_ms=last_moves,
            ranges_in_flight=(
                (lambda _cluster: frozenset())
                if journal is None
                else partial(ranges_in_flight, journal)
            ),
            # ids of other clusters are ignored there
            draining_of=lambda cluster: drain | marked(cluster),
            pace_drains=False,  # the whole drain; `apply` sends it under the rate limits
            rollout_order_of=rollout_order_of,
        )
        by_cluster: dict[str, list[BundleLoad]] = {}
        for bundle in bundles:
            by_cluster.setdefault(bundle.cluster, []).append(bundle)
        for cluster in clusters:
            if cluster in out.errors:
                continue
            if cluster not in board.clusters():
                out.errors[cluster] = (
                    f"cluster {cluster}: no broker was read by its id (polled through its "
                    "admin URL only)"
                )
                continue
            mine = by_cluster.get(cluster, [])
            try:  # the planner logs and skips a cluster without rules: say why here
                planner.rules.rules(cluster, [b.namespace for b in mine])
            except Exception as exc:
                out.errors[cluster] = _why(cluster, "its placement rules cannot be read", exc)
                continue
            plan = planner.plan(
                cluster, mine, window_end_ms=window_end_ms, now_ms=now_ms, splits=splits
            )
            loads = planner.last_loads.get(cluster)
            if plan is None or loads is None:
                out.errors[cluster] = f"cluster {cluster}: no broker load read lately"
                continue
            denied = tuple(m for m in plan.moves if not allows(m.namespace))
            out.clusters[cluster] = ClusterMoves(loads, plan, denied)
    finally:
        if journal is not None:
            journal.close()
    check_drain(drain, out)
    return out


def check_drain(drain: frozenset[str], moves: MovesPlan) -> None:
    """Every broker to drain is a broker of a cluster planned, else a ValueError naming it
    and the brokers there are (a typo must not plan a drain of nothing)."""
    known = {load.broker for c in moves.clusters.values() for load in c.loads.brokers}
    unknown = sorted(drain - known)
    if not unknown:
        return
    unread = f"; not planned: {', '.join(sorted(moves.errors))}" if moves.errors else ""
    raise ValueError(
        f"--drain {' '.join(unknown)}: not a broker of the clusters planned "
        f"(brokers: {', '.join(sorted(known)) or 'none read'}{unread})"
    )


def _why(cluster: str, what: str, exc: Exception) -> str:
    from balancer.app.commands.plan_live import _explain

    return f"{_explain(cluster, exc)} ({what})"


# --- output ----------------------------------------------------------------------------------


def moves_json(moves: MovesPlan | None) -> dict[str, Any]:
    """The JSON keys of the moves: `brokers`, `moves`, `moves_blocked` (and why none)."""
    if moves is None:
        return {
            "brokers": [],
            "moves": [],
            "moves_blocked": [],
            "draining": [],
            "drain_blocked": [],
            "marked": [],
            "drain_marks": None,
            "rolling": [],
            "moves_note": None,
        }
    brokers = []
    blocked = []
    draining: list[dict[str, str]] = []
    drain_blocked: list[dict[str, str]] = []
    for cluster, c in moves.clusters.items():
        for load in c.loads.brokers:
            brokers.append(
                {
                    "cluster": cluster,
                    "broker": load.broker,
                    "load_before": c.plan.loads_before.get(load.broker, load.load_ratio),
                    "load_after": c.plan.loads_after.get(load.broker, load.load_ratio),
                    "source": load.source.value,
                }
            )
        blocked += [
            {
                "cluster": cluster,
                "broker": b.broker,
                "load_ratio": b.load_ratio,
                "reason": b.reason.value,
            }
            for b in c.plan.blocked
        ]
        draining += [{"cluster": cluster, "broker": b} for b in c.plan.draining]
        drain_blocked += [
            {"cluster": cluster, "bundle": b.bundle, "broker": b.broker, "reason": b.reason.value}
            for b in c.plan.drain_blocked
        ]
    return {
        "brokers": brokers,
        "moves": [m.to_dict() for m in moves.moves],
        "moves_denied": [m.to_dict() for c in moves.clusters.values() for m in c.denied],
        "moves_blocked": blocked,
        "draining": draining,
        "drain_blocked": drain_blocked,
        "marked": [{"cluster": c, "broker": b} for c, bs in moves.marked.items() for b in bs],
        "drain_marks": _marks_state(moves.marks_note),
        "rolling": [{"cluster": c, "order": list(o)} for c, o in moves.rolling.items()],
        "moves_errors": [{"cluster": k, "error": v} for k, v in moves.errors.items()],
        "moves_note": moves.note,
    }


def _marks_state(note: str | None) -> str | None:
    """`read`, or `unknown (why)`, from the note (None: the marks were not asked)."""
    return None if note is None else note.removeprefix("Drain marks: ")


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.0f} %"


def moves_parts(moves: MovesPlan | None) -> list[RenderableType]:
    """For people: per cluster, each broker's load before and after, the moves with their
    reason and the load they move, and the brokers still over target with why."""
    if moves is None:
        return []
    parts: list[RenderableType] = []
    if moves.note:
        parts.append(moves.note)
    if moves.marks_note is not None and moves.marks_note != "Drain marks: read":
        parts.append(f"{moves.marks_note}: brokers marked draining are not shown.")
    for cluster, order in moves.rolling.items():
        parts.append(
            f"Roll in progress on {cluster} (`roll start`), restart order {', '.join(order)}: "
            "a drain sends its bundles to brokers already restarted, then to the last to "
            "restart."
        )
    for cluster, c in moves.clusters.items():
        plan = c.plan
        state = "balanced" if plan.balanced_before else "not balanced"
        after = "balanced" if plan.balanced_after else "not balanced"
        parts.append(
            make_table(
                f"Brokers of {cluster} ({state} now; {after} after {len(c.moves)} move(s))",
                ("broker", "load now", "after moves", "bundles now", "load from"),
                [
                    (
                        f"{load.broker} (draining)"
                        if load.broker in plan.draining
                        else load.broker,
                        _pct(plan.loads_before.get(load.broker, load.load_ratio)),
                        _pct(plan.loads_after.get(load.broker, load.load_ratio)),
                        load.bundle_count,
                        load.source.value,
                    )
                    for load in c.loads.brokers
                ],
            )
        )
        if c.moves:
            parts.append(_moves_table(f"Moves in {cluster}", c.moves))
        if c.denied:
            parts.append(
                _moves_table(
                    f"Moves in {cluster} not acted on (namespace outside the allow-list)",
                    c.denied,
                )
            )
        if plan.blocked:
            parts.append(
                make_table(
                    f"Brokers of {cluster} still over target with no move",
                    ("broker", "load", "because"),
                    [(b.broker, _pct(b.load_ratio), b.reason.value) for b in plan.blocked],
                )
            )
        if plan.drain_blocked:
            parts.append(
                make_table(
                    f"Bundles of draining brokers of {cluster} that cannot leave",
                    ("bundle", "broker", "because"),
                    [(b.bundle, b.broker, b.reason.value) for b in plan.drain_blocked],
                )
            )
    for error in moves.errors.values():  # each names its cluster: "cluster X: ..."
        parts.append(f"No moves planned: {error}.")
    return parts


def _moves_table(title: str, moves: Sequence[MoveDecision]) -> Table:
    return make_table(
        title,
        ("namespace", "bundle", "from", "to", "reason", "msg/s", "MiB/s", "sessions", "load"),
        [
            (
                m.namespace,
                str(m.bundle),
                f"{m.source} ({_pct(m.source_load_before)} -> {_pct(m.source_load_after)})",
                f"{m.destination} ({_pct(m.destination_load_before)} -> "
                f"{_pct(m.destination_load_after)})",
                m.reason.value,
                f"{m.msg_rate:,.0f}",
                f"{m.throughput_bytes / 1048576:,.1f}",
                m.sessions,
                _pct(m.bundle_load_ratio),
            )
            for m in moves
        ],
    )
