"""The controller wired from the config: its gate settings, its parts, and the stream's handler."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Protocol

from balancer.app.config import BalancerConfig
from balancer.controller.apply import Controller
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.controller.clock import Clock, SystemClock
from balancer.controller.handler import ControllerHandler
from balancer.controller.journal import Journal
from balancer.controller.move_planning import MovePlanner, PlacementReads, RulesCache
from balancer.controller.move_steps import moves_in_flight_from, ranges_in_flight
from balancer.controller.offload_point import OffloadPointFn, default_offload_point
from balancer.controller.ports import AdminPort, MovePort, PulsarConfigPort, WriterLease
from balancer.controller.pulsar_shedder import SwitchSink, SwitchState, check_pulsar_switches
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.settings import ControllerSettings

# Isolation policies, failure domains and anti-affinity groups change rarely: read again after.
PLACEMENT_RULES_TTL_S = 300.0


def controller_settings(config: BalancerConfig) -> ControllerSettings:
    """The controller's gate settings (mode, allow/deny lists); `plan` applies the same."""
    c = config.controller
    return ControllerSettings(
        mode=c.mode,
        allow_namespaces=c.allow_namespaces,
        deny_namespaces=c.deny_namespaces,
        unload_after_split=c.unload_after_split,
        offload_follow_s=c.offload_follow_s,
        move_settle_s=c.move_settle_s,
    )


def no_draining(_cluster: str) -> frozenset[str]:
    """The default drain marks: no broker is draining (`draining_of`)."""
    return frozenset()


def build_controller(
    config: BalancerConfig,
    admin: AdminPort,
    *,
    clock: Clock | None = None,
    journal_path: Path | None = None,
    audit_path: Path | None = None,
    lease: WriterLease | None = None,
    audit_fields: Mapping[str, object] | None = None,
    offload_point: OffloadPointFn = default_offload_point,
    role: str = "run",
    draining_of: Callable[[str], frozenset[str]] | None = None,
) -> Controller:
    """A controller wired from the config (journal, audit log, limits, breakers).
    `audit_fields` go into every audit record; `offload_point` replaces the size rule
    (`apply PLAN` offloads up to the planned point); `role` names the process in the
    journal's writer ids (`run`, `apply`)."""
    clock = clock or SystemClock()
    c = config.controller
    return Controller(
        admin,
        settings=controller_settings(config),
        journal=Journal(journal_path or c.journal_path, role=role),
        audit=AuditLog(audit_path or c.audit_log_path, fields=audit_fields),
        limits=ActionLimits(
            splits_per_minute=c.rate_limits.splits_per_minute,
            splits_per_minute_per_namespace=c.rate_limits.splits_per_minute_per_namespace,
            offloads_per_minute=c.rate_limits.offloads_per_minute,
            offloads_per_minute_per_namespace=c.rate_limits.offloads_per_minute_per_namespace,
            moves_per_minute=c.rate_limits.moves_per_minute,
            moves_per_minute_per_namespace=c.rate_limits.moves_per_minute_per_namespace,
            clock=clock,
        ),
        breakers=Breakers(
            failure_threshold=c.breaker.failure_threshold,
            cooloff_s=c.breaker.cooloff_s,
            clock=clock,
        ),
        clock=clock,
        lease=lease,
        offload_point=offload_point,
        # The client moves bundles once it has unload-to-a-destination and ownership reads.
        mover=admin if isinstance(admin, MovePort) else None,
        draining_of=draining_of,  # None: no broker is draining
    )


def check_pulsar_switches_at_start(
    config: BalancerConfig, admin: object, metrics: SwitchSink | None = None
) -> list[SwitchState]:
    """Read Pulsar's shedder and auto-split on every cluster; warn, export, and turn them off
    when `controller.disable_pulsar_*` says so (apply mode only). Never raises for a cluster;
    a client without the configuration routes is skipped."""
    if not isinstance(admin, PulsarConfigPort):
        return []
    c = config.controller
    return check_pulsar_switches(
        admin,
        [cluster.name for cluster in config.clusters],
        disable_shedder=c.disable_pulsar_shedder,
        disable_auto_split=c.disable_pulsar_auto_split,
        dry_run=c.mode != "apply",
        metrics=metrics,
    )


def start_pulsar_switch_checks(
    config: BalancerConfig, admin: object, metrics: SwitchSink | None = None
) -> list[threading.Thread]:
    """`check_pulsar_switches_at_start` in the background, one thread per cluster: a slow or
    blackholed cluster (minutes of attempts x timeout) holds up neither the start nor the
    other clusters' checks. Daemon threads: the process's exit never waits for them."""
    threads = []
    for cluster in config.clusters:
        one = config.model_copy(update={"clusters": (cluster,)})
        thread = threading.Thread(
            target=check_pulsar_switches_at_start,
            args=(one, admin, metrics),
            name=f"pulsar-switches-{cluster.name}",
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    return threads


def broker_board(config: BalancerConfig) -> BrokerLoadBoard | None:
    """Where the collector leaves each broker's polls for the moves (None: moves are off).
    Kept for three windows: a window closes up to its watermark delay after its end."""
    if not config.moves.enabled:
        return None
    window_s = max(config.spark.window_s, config.collector.interval_s)
    return BrokerLoadBoard(retain_ms=int(3 * window_s * 1000))


def move_planner(
    config: BalancerConfig,
    admin: PlacementReads,
    board: BrokerLoadBoard,
    *,
    last_moves_ms: Callable[[str], Mapping[str, int]],
    ranges_in_flight: Callable[[str], frozenset[str]] = lambda _cluster: frozenset(),
    monotonic: Callable[[], float] = time.monotonic,
    draining_of: Callable[[str], frozenset[str]] = no_draining,
    in_flight_from: Callable[[str], Mapping[str, int]] = lambda _cluster: {},
    pace_drains: bool = True,
    rollout_order_of: Callable[[str], tuple[str, ...]] = lambda _cluster: (),
    roll_moves_of: Callable[[str], Mapping[str, int]] = lambda _cluster: {},
) -> MovePlanner:
    """The move planner `run` and `plan` share, wired from `moves`. `draining_of`: cluster
    -> broker ids marked draining (default: none)."""
    moves = config.moves
    return MovePlanner(
        board,
        RulesCache(
            admin,
            ttl_s=PLACEMENT_RULES_TTL_S,
            max_topics_per_broker=moves.max_topics_per_broker,
            monotonic=monotonic,
        ),
        settings=moves.settings(),
        capacity_of=moves.capacity_of,
        window_s=config.spark.window_s,
        last_moves_ms=last_moves_ms,
        movable=controller_settings(config).allows,
        ranges_in_flight=ranges_in_flight,
        draining_of=draining_of,
        moves_in_flight_from=in_flight_from,
        drain_moves_in_flight_per_broker=moves.drain_moves_in_flight_per_broker,
        drain_moves_per_minute=moves.drain_moves_per_minute,
        pace_drains=pace_drains,
        rollout_order_of=rollout_order_of,
        roll_moves_of=roll_moves_of,
    )


def _roll_moves(
    journal: Journal, roll_started_of: Callable[[str], int | None], cluster: str
) -> Mapping[str, int]:
    """Each bundle's moves since the cluster's last roll started, while they count."""
    since_ms = roll_started_of(cluster)
    return {} if since_ms is None else journal.move_counts_since(cluster, since_ms)


def build_handler(
    config: BalancerConfig,
    admin: BalancerAdmin,
    *,
    clock: Clock | None = None,
    lease: WriterLease | None = None,
    board: BrokerLoadBoard | None = None,
    draining_of: Callable[[str], frozenset[str]] | None = None,
    rollout_order_of: Callable[[str], tuple[str, ...]] = lambda _cluster: (),
    roll_started_of: Callable[[str], int | None] = lambda _cluster: None,
) -> ControllerHandler:
    """The BatchHandler for the stream, wired from the config. With a `board`, each window
    also plans bundle moves between brokers. `draining_of`: cluster -> brokers marked
    draining (None: none), for both the planner and the controller's send-time check."""
    draining = draining_of or no_draining
    controller = build_controller(config, admin, clock=clock, lease=lease, draining_of=draining)
    mover = (
        None
        if board is None
        else move_planner(
            config,
            admin,
            board,
            last_moves_ms=controller.journal.last_moves,
            ranges_in_flight=partial(ranges_in_flight, controller.journal),
            draining_of=draining,
            in_flight_from=partial(moves_in_flight_from, controller.journal),
            rollout_order_of=rollout_order_of,
            roll_moves_of=partial(_roll_moves, controller.journal, roll_started_of),
        )
    )
    return ControllerHandler(
        controller,
        thresholds=config.thresholds_model(),
        detection=config.detection_settings(),
        # A batch waits this long for a slow cluster's actions, then goes on without them.
        batch_wait_s=max(10.0, config.spark.trigger_interval_s),
        mover=mover,
    )


class BalancerAdmin(AdminPort, PlacementReads, Protocol):
    """What the handler's controller and move planner ask of Pulsar."""
