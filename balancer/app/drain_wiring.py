"""Drain marks wired from the config: the store, the controller's `draining_of`, the restart
rule, and whether a balancer holds the writer lease (for `drain --wait`).

`DrainMarksView.draining(cluster)` is what the move planner asks each cycle (the `draining_of`
of `MovePlanner`): it re-reads the marks topic (incremental, bounded), applies the restart
rule to the brokers the cluster lists now (writing its changes only while this balancer
holds the writer lease, so a standby never writes), and answers the brokers still draining.
Kafka or Pulsar away: the marks last read are answered, never an exception.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from balancer.app.config import BalancerConfig
from balancer.app.lease_wiring import lease_identity
from balancer.app.stream_settings import kafka_security
from balancer.controller.ports import DynamicConfigPort
from balancer.controller.rollout import finish_rollout
from balancer.core.drain_marks import DrainMark, restart_rule
from balancer.core.rollout_record import roll_complete, roll_moves_count_since
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.kafka.lease import KafkaWriterLease

log = logging.getLogger(__name__)

# The marks are re-read at most this often: a cycle asks once per cluster.
MARKS_REFRESH_S = 5.0
# The restart rule looks at the marked brokers this often between cycles. A broker (a JVM
# that registers again in the metadata store) is unlisted for longer than this when it
# restarts; a restart the rule misses leaves the mark on (`drain --undo` clears it).
WATCH_INTERVAL_S = 5.0
STOP_WAIT_S = 1.0  # how long stop() waits for the watcher's round to end
ROLL_COMPLETE_BY = "pulsar-balancer (roll complete)"


def build_drain_marks(config: BalancerConfig, *, timeout_s: float = 10.0) -> KafkaDrainMarks:
    """The peer group's marks on `kafka.drain_marks_topic`."""
    return KafkaDrainMarks(
        bootstrap_servers=",".join(config.kafka.bootstrap_servers),
        topic=config.kafka.drain_marks_topic,
        client_kwargs=kafka_security(config).client_kwargs(),
        timeout_s=timeout_s,
    )


def who_am_i() -> str:
    """Who sets a mark: the user and the host (a broker pod's name in its preStop hook)."""
    try:
        user = os.getlogin()
    except OSError:
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


class DrainMarksView:
    """The controller's view of the marks: `draining(cluster)` is MovePlanner's `draining_of`."""

    def __init__(
        self,
        marks: KafkaDrainMarks,
        *,
        listed_brokers: Callable[[str], tuple[str, ...]],
        may_write: Callable[[], bool],
        refresh_s: float = MARKS_REFRESH_S,
        monotonic: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        config_admin: DynamicConfigPort | None = None,
    ) -> None:
        """`config_admin`: Pulsar's dynamic configuration, to finish a roll whose brokers
        have all restarted (`roll_complete`) when no `roll finish` came (None: never)."""
        self.config_admin = config_admin
        self.marks = marks
        self._listed = listed_brokers
        self._may_write = may_write
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._now_ms = now_ms
        self._refreshed_at = float("-inf")
        self.read_failures = 0  # refreshes that failed (Kafka away): the last marks answered
        self._lock = threading.Lock()  # the planner's thread and the watcher's
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def draining(self, cluster: str) -> frozenset[str]:
        """The brokers of `cluster` marked draining. With the watcher running (`start`), the
        marks it read last: the planner never waits for Kafka or Pulsar here."""
        if self._thread is None:
            self.check(cluster)
        return self.marks.draining(cluster)

    def check(self, cluster: str) -> None:
        """Re-read the marks (at most every `refresh_s`), apply the restart rule, and finish
        a roll whose brokers have all restarted."""
        with self._lock:
            self._refresh()
            self._apply_restart_rule(cluster)
            self._finish_complete_roll(cluster)

    def rollout_order(self, cluster: str) -> tuple[str, ...]:
        """The restart order of the cluster's roll in progress (`roll start`), else ()."""
        rollout = self.marks.rollout(cluster)
        return rollout.order if rollout is not None and rollout.rolling else ()

    def roll_moves_count_since(self, cluster: str, *, grace_period_s: float) -> int | None:
        """Since when bundles' moves count against a roll's limit (`roll_moves_count_since`)."""
        return roll_moves_count_since(
            self.marks.rollout(cluster), now_ms=self._now_ms(), grace_period_s=grace_period_s
        )

    def _finish_complete_roll(self, cluster: str) -> None:
        rollout = self.marks.rollout(cluster)
        if (
            self.config_admin is None
            or rollout is None
            or not self._may_write()
            or not roll_complete(rollout, self.marks.marks(cluster))
        ):
            return
        try:
            finish_rollout(self.marks, self.config_admin, cluster,
                           by=ROLL_COMPLETE_BY, now_ms=self._now_ms())  # fmt: skip
        except Exception as exc:  # Pulsar or Kafka away: tried again next round
            log.warning("roll of %s: every broker restarted, but its switches were not "
                        "restored yet (%s); retried", cluster, exc)  # fmt: skip
            return
        log.warning(
            "roll of %s: every broker of its order restarted; Pulsar's shedder and "
            "auto-split restored as they were (no `roll finish` needed)",
            cluster,
        )

    def current(self) -> tuple[DrainMark, ...]:
        """Every mark as last read (no Kafka call): for the live view."""
        return self.marks.marks()

    # -- the watcher: the restart rule between two cycles ---------------------------------

    def start(
        self,
        clusters: Sequence[str],
        *,
        interval_s: float = WATCH_INTERVAL_S,
        on_marks: Callable[[tuple[DrainMark, ...]], None] | None = None,
    ) -> None:
        """Apply the restart rule every `interval_s` on a thread of its own: a broker
        restarts in less than a decision cycle (60 s), so a cycle alone could miss the
        time it was unlisted. `on_marks` is given the marks after each round."""

        def watch() -> None:
            while not self._stop.wait(interval_s):
                for cluster in clusters:
                    try:
                        self.check(cluster)
                    except Exception:  # never let the watcher die
                        log.exception("drain marks: restart rule on %s failed", cluster)
                if on_marks is not None:
                    on_marks(self.current())

        if self._thread is None:
            self._thread = threading.Thread(target=watch, name="drain-marks", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the watcher and close the store, never waiting on Kafka: with Kafka away the
        watcher may be inside a read for up to the store's timeout, and the process must end
        on time (a Kafka outage ends `run`). The watcher is a daemon thread; a mark it was
        writing is idempotent state, written again by the next holder."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
            if self._thread.is_alive():
                log.info("drain marks: the watcher is still in a Kafka call; not waiting for it")
                return
        self.marks.close()

    def _refresh(self) -> None:
        now = self._monotonic()
        if now - self._refreshed_at < self._refresh_s:
            return
        self._refreshed_at = now
        try:
            self.marks.refresh()
        except Exception as exc:  # Kafka away: keep the marks read last
            self.read_failures += 1
            log.warning("drain marks not re-read (%s); using the %d read before",
                        exc, len(self.marks.marks()))  # fmt: skip

    def _apply_restart_rule(self, cluster: str) -> None:
        current = self.marks.marks(cluster)
        if not any(m.draining for m in current) or not self._may_write():
            return
        try:
            listed = self._listed(cluster)
        except Exception as exc:  # Pulsar away: the rule waits for the next answer
            log.warning("drain marks: brokers of %s not listed (%s); restart rule skipped",
                        cluster, exc)  # fmt: skip
            return
        changes = restart_rule(current, cluster, listed, at_ms=self._now_ms())
        if not changes:
            return
        try:
            self.marks.write(changes)
        except Exception as exc:
            log.warning("drain marks: restart rule's changes not written (%s); retried", exc)
            return
        for mark in changes:
            log.info("drain mark of %s/%s is now %s (restart rule)",
                     mark.cluster, mark.broker, mark.state)  # fmt: skip


def drain_marks_view(
    config: BalancerConfig,
    admin: object,
    *,
    lease_held: Callable[[], bool] | None = None,
    dry_run: bool = True,
) -> DrainMarksView:
    """The view `run` gives the move planner; `lease_held` None: this balancer always acts."""
    list_brokers: Callable[[str], tuple[str, ...]] = getattr(admin, "list_brokers")  # noqa: B009
    return DrainMarksView(
        build_drain_marks(config),
        listed_brokers=list_brokers,
        may_write=lease_held or (lambda: True),
        # Never in dry-run: the balancer then changes nothing on Pulsar.
        config_admin=admin if isinstance(admin, DynamicConfigPort) and not dry_run else None,
    )


BalancerState = Literal["up", "down", "unknown"]
# How `drain --wait` names itself in the writer-lease group: a lease held by another
# `drain --wait` is no balancer (this one joins the group too, to take over if it ends).
DRAIN_LEASE_PREFIX = "drain-command"


@dataclass(frozen=True, slots=True)
class BalancerLiveness:
    state: BalancerState
    detail: str


def probe_balancer(
    config: BalancerConfig,
    *,
    timeout_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> BalancerLiveness:
    """Whether a balancer of the peer group is alive: join its writer-lease group for a moment.

    The lease is sticky: a live holder keeps it and this member learns its name (`up`); with
    no live holder the group gives the lease to this member (`down`), which gives it up at
    once (until the controller's drain cycle can run here, see `drain_by_itself`), so a
    standby balancer is not kept waiting. Without a writer lease in the config, `unknown`.
    """
    if not config.controller.uses_writer_lease:
        return BalancerLiveness(
            "unknown", "the config runs no writer lease (controller.mode dry-run or lease off)"
        )
    names = [c.name for c in config.clusters]
    settings = config.controller.writer_lease
    lease = KafkaWriterLease(
        bootstrap_servers=",".join(config.kafka.bootstrap_servers),
        group_id=settings.group_id(names),
        topic=settings.topic_name(names),
        identity=f"{DRAIN_LEASE_PREFIX}-probe:{lease_identity()}",
        lease_s=settings.lease_s,
        safety_margin_s=settings.safety_margin_s,
        client_kwargs=kafka_security(config).client_kwargs(),
        yields=True,  # never takes the lease from a `drain --wait` that acts
    )
    wait_s = timeout_s if timeout_s is not None else settings.lease_s + 10.0
    try:
        lease.start()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            status = lease.status()
            if status.held:
                return BalancerLiveness(
                    "down", f"no balancer holds the writer lease of group {lease.group_id}"
                )
            if status.holder is not None and status.holder.startswith(DRAIN_LEASE_PREFIX):
                return BalancerLiveness(
                    "down", f"no balancer runs: another drain command ({status.holder}) acts"
                )
            if status.holder is not None:
                return BalancerLiveness("up", f"the writer lease is held by {status.holder}")
            sleep(0.2)
        return BalancerLiveness(
            "unknown", f"the writer lease group {lease.group_id} did not answer in {wait_s:g} s"
        )
    finally:
        lease.stop()
