"""The controller wired from the config: its gate settings, its parts, and the stream's handler."""

from __future__ import annotations

from pathlib import Path

from balancer.app.config import BalancerConfig
from balancer.controller.apply import Controller
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers
from balancer.controller.clock import Clock, SystemClock
from balancer.controller.handler import ControllerHandler
from balancer.controller.journal import Journal
from balancer.controller.ports import AdminPort, MovePort, PulsarConfigPort, WriterLease
from balancer.controller.pulsar_shedder import SwitchSink, SwitchState, check_pulsar_switches
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.settings import ControllerSettings


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


def build_controller(
    config: BalancerConfig,
    admin: AdminPort,
    *,
    clock: Clock | None = None,
    journal_path: Path | None = None,
    audit_path: Path | None = None,
    lease: WriterLease | None = None,
) -> Controller:
    """A controller wired from the config (journal, audit log, limits, breakers)."""
    clock = clock or SystemClock()
    c = config.controller
    return Controller(
        admin,
        settings=controller_settings(config),
        journal=Journal(journal_path or c.journal_path),
        audit=AuditLog(audit_path or c.audit_log_path),
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
        # The client moves bundles once it has unload-to-a-destination and ownership reads.
        mover=admin if isinstance(admin, MovePort) else None,
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


def build_handler(
    config: BalancerConfig,
    admin: AdminPort,
    *,
    clock: Clock | None = None,
    lease: WriterLease | None = None,
) -> ControllerHandler:
    """The BatchHandler for the stream, wired from the config."""
    controller = build_controller(config, admin, clock=clock, lease=lease)
    return ControllerHandler(
        controller,
        thresholds=config.thresholds_model(),
        detection=config.detection_settings(),
        # A batch waits this long for a slow cluster's actions, then goes on without them.
        batch_wait_s=max(10.0, config.spark.trigger_interval_s),
    )
