"""`drain --wait` draining by itself while no balancer runs (issue 43, point 3).

When the writer-lease group has no live member, `drain --wait` takes the writer lease itself
and, while it holds it, runs each `--interval-s` one cycle of what `run` does for a draining
broker, through the same parts:

- one round of broker polls, taken as `plan` and the collector take them
  (`plan_live.take_samples`, into a `BrokerLoadBoard`);
- the move planner `run` uses (`controller_wiring.move_planner`) with the drain marks read
  from Kafka (`DrainMarksView.draining`, the restart rule written only while the lease is
  held) and the configured pace (`moves.drain_moves_in_flight_per_broker`,
  `moves.drain_moves_per_minute`);
- the controller `run` uses (`controller_wiring.build_controller`, role `drain`): the
  allow-list, the journal, the rate limits, the breakers, the fresh check before each send,
  the lease asked again right before each unload, each move read back where it landed.

Only the cycle's drain moves are sent (reason `drain`, and the `clear_leftover` follow-ups
the controller makes itself): balancing the rest of the cluster is `run`'s job.

One writer at a time: a cycle acts only while this process holds the lease. Two
`drain --wait` processes both join the group; one holds the lease and acts, the other
only waits (and takes over if the first ends). The command's member `yields`
(`balancer.kafka.lease.choose_holder`): a balancer that starts meanwhile takes the lease
over at its first rebalance, and this command stops acting and only waits for the brokers
to empty (the balancer drains them by the same rules, reading the same marks); so does it
when its own session lapses.

The journal: `controller.journal_path`, or `--journal`. Each intent names this process
(`drain@host:pid/token`); intents a killed `drain --wait` left open, and moves sent without
an answer, are settled from Pulsar's ownership (`Controller.reconcile`) before the next cycle
plans, never sent again. See docs/operations.md ("Draining with the balancer down").
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING

from balancer.app.commands.plan_live import take_samples
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_controller, move_planner
from balancer.app.drain_wiring import DRAIN_LEASE_PREFIX, DrainMarksView
from balancer.app.lease_wiring import lease_identity
from balancer.app.stream_settings import kafka_security
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.controller.move_steps import moves_in_flight_from, ranges_in_flight
from balancer.controller.ports import WriterLease
from balancer.core.moves.model import DrainBlock, MoveReason
from balancer.core.planning import window_loads
from balancer.core.results import ActionResult
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.kafka.lease import KafkaWriterLease

if TYPE_CHECKING:
    from balancer.pulsar.client import PulsarPeerGroup

log = logging.getLogger(__name__)


def self_drain_lease(config: BalancerConfig) -> KafkaWriterLease:
    """A member of the peer group's writer-lease group, named as the drain command."""
    settings = config.controller.writer_lease
    names = [c.name for c in config.clusters]
    return KafkaWriterLease(
        bootstrap_servers=",".join(config.kafka.bootstrap_servers),
        group_id=settings.group_id(names),
        topic=settings.topic_name(names),
        identity=f"{DRAIN_LEASE_PREFIX}:{lease_identity()}",
        lease_s=settings.lease_s,
        safety_margin_s=settings.safety_margin_s,
        client_kwargs=kafka_security(config).client_kwargs(),
        yields=True,  # a balancer that starts takes the lease over: it drains the same way
    )


def cannot_drain_by_itself(config: BalancerConfig) -> str | None:
    """Why this config gives `drain --wait` no way to drain by itself (None: it can)."""
    if not config.controller.uses_writer_lease:
        return "the config runs no writer lease (controller.mode apply and writer_lease on)"
    if not config.moves.enabled:
        return "moves are off (moves.enabled is false)"
    return None


class SelfDrain:
    """One cycle of the controller's drain rules (`cycle(cluster)`), acting only with the lease."""

    def __init__(
        self,
        config: BalancerConfig,
        admin: PulsarPeerGroup,
        marks: KafkaDrainMarks,
        lease: WriterLease,
        *,
        journal_path: Path | None = None,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.admin = admin
        self.lease = lease
        self._now_ms = now_ms
        self._cycles = count(1)
        self._acting: bool | None = None  # last said: acting or waiting (one line per change)
        self.view = DrainMarksView(
            marks,
            listed_brokers=admin.list_brokers,
            may_write=lambda: lease.status().held,
        )
        self.controller = build_controller(
            config,
            admin,
            journal_path=journal_path,
            lease=lease,
            role="drain",
            draining_of=self.view.draining,
        )
        self.board = BrokerLoadBoard(
            retain_ms=int(3 * max(config.spark.window_s, config.collector.interval_s) * 1000)
        )
        journal = self.controller.journal
        self.planner = move_planner(
            config,
            admin,
            self.board,
            last_moves_ms=journal.last_moves,
            ranges_in_flight=lambda cluster: ranges_in_flight(journal, cluster),
            draining_of=self.view.draining,
            in_flight_from=lambda cluster: moves_in_flight_from(journal, cluster),
        )
        self._said_stuck: set[tuple[str, DrainBlock]] = set()  # one line per new reason
        self.moves_sent: list[tuple[str, str, str, ActionResult]] = []  # bundle, from, to

    def cycle(self, cluster: str) -> None:
        """Settle what is open, poll once, plan, and send this cycle's drain moves: all only
        while the lease is held. Never raises (a failed cycle is logged; the next retries)."""
        status = self.lease.status()
        self._say_acting(status.held, status.holder or status.detail)
        if not status.held:
            return
        try:
            self._act(cluster)
        except Exception as exc:  # a bug or Pulsar away: `--wait` goes on reading ownership
            log.exception("drain: cycle on %s failed", cluster)
            print(f"drain: this cycle failed ({type(exc).__name__}: {exc}); retried",
                  file=sys.stderr)  # fmt: skip

    def _act(self, cluster: str) -> None:
        ctl = self.controller
        if ctl.journal.has_unsettled():
            # Intents a killed drain (or apply, run) left open, and moves sent without an
            # answer: settled from Pulsar's state, never sent again.
            ctl.reconcile()
        errors: dict[str, str] = {}
        one = self.config.model_copy(update={"clusters": (self.config.cluster(cluster),)})
        samples = take_samples(
            self.admin, one, samples=1, interval_s=0.0, sleep=lambda _s: None,
            errors=errors, board=self.board, load_errors=errors,
        )  # fmt: skip
        if cluster in errors:
            print(f"drain: {errors[cluster]}; nothing moved this cycle", file=sys.stderr)
            return
        now_ms = self._now_ms()
        plan = self.planner.plan(cluster, window_loads(samples), window_end_ms=now_ms,
                                 now_ms=now_ms)  # fmt: skip
        if plan is None:
            print(f"drain: no move planned on {cluster} this cycle (see the log)",
                  file=sys.stderr)  # fmt: skip
            return
        batch_id = f"drain-{ctl.journal.writer_id}-{next(self._cycles)}"
        for move in plan.moves:
            if move.reason is not MoveReason.DRAIN:
                continue  # balancing the others is `run`'s job
            if not self.lease.status().held:
                return  # the controller would refuse it anyway (no_lease)
            outcome = ctl.handle(move, batch_id=batch_id)
            name = move.bundle.key(move.namespace)
            self.moves_sent.append((name, move.source, move.destination, outcome.result))
            print(f"drain: {name} {move.source} -> {move.destination}: "
                  f"{outcome.result.value} ({outcome.detail})", file=sys.stderr)  # fmt: skip
        stuck = {(b.bundle, b.reason) for b in plan.drain_blocked}
        for bundle, reason in sorted(stuck - self._said_stuck):
            print(f"drain: {bundle} cannot leave its broker ({reason.value})", file=sys.stderr)
        self._said_stuck = stuck

    def _say_acting(self, held: bool, who: str) -> None:
        if held == self._acting:
            return
        self._acting = held
        if held:
            print("drain: this command holds the writer lease and drains by itself, "
                  "through the controller's rules", file=sys.stderr)  # fmt: skip
        else:
            print(f"drain: this command does not hold the writer lease ({who}): it only "
                  "waits", file=sys.stderr)  # fmt: skip

    def moves_open(self) -> bool:
        """A move this process sent is not settled yet (no outcome, or `unknown`: unloaded
        and not owned again), while it holds the lease: the next cycle reconciles it from
        Pulsar's ownership. Once a balancer holds the lease, settling is its job."""
        return self.lease.status().held and self.controller.journal.has_unsettled()

    def close(self) -> None:
        self.controller.close()


@contextmanager
def drain_by_itself(
    config: BalancerConfig,
    admin: PulsarPeerGroup,
    marks: KafkaDrainMarks,
    *,
    journal_path: Path | None = None,
) -> Iterator[SelfDrain]:
    """Join the writer-lease group and yield the drain cycle; leave the group on exit."""
    lease = self_drain_lease(config)
    lease.start()
    try:
        drain = SelfDrain(config, admin, marks, lease, journal_path=journal_path)
        try:
            yield drain
        finally:
            drain.close()
    finally:
        lease.stop()
