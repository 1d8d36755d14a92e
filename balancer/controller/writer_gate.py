"""The single-writer lease's gate: a balancer that does not hold the lease sends nothing.

Asked in the controller's gate (a standby decides as in dry-run and touches nothing) and
again immediately before each call that changes Pulsar: a lease is valid only until a local
deadline, and a holder paused past it (SIGSTOP, a long GC, a frozen VM) must not send the
call it was about to send when it resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from balancer.controller.outcome import Finish
from balancer.controller.ports import WriterLease
from balancer.core.results import ActionResult

_T = TypeVar("_T")


def check_writer(lease: WriterLease | None, what: str) -> None:
    """Raise Finish(no_lease) unless this process holds a valid lease (None: no lease used)."""
    if lease is None:
        return
    status = lease.status()
    if not status.held:
        raise Finish(ActionResult.NO_LEASE, f"{what}: {status.detail}")


def fenced(lease: WriterLease | None, fn: Callable[[], _T]) -> Callable[[], _T]:
    """`fn`, a call that changes Pulsar, that asks the lease first."""

    def call() -> _T:
        check_writer(lease, "not sent")
        return fn()

    return call
