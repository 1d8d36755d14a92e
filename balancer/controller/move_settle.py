"""What became of a move whose outcome was not known: an `unknown` one (sent; no broker owned
the bundle yet, or the call got no answer) and a move intent a crash left open.

Ownership is read from `ownedNamespaces` of the move's destination, its source, then every
broker `GET /admin/v2/brokers/{cluster}` lists as active (never a lookup). Brokers come and
go: one scaled down or restarted with a new address is no longer listed (Pulsar lists the
brokers registered under `/loadbalance/brokers`, `LoadManager.getAvailableBrokersAsync`), no
longer answers, and the bundles it owned are owned by nobody until the next lookup (its
ownership entries were ephemeral). So a source or destination that is not listed and does
not answer is *gone*, not an error that stops the check: the move settles from the brokers
that are there.

- Owned by some broker read: as right after the unload (`move_steps.move_verdict`).
- Owned by nobody read, the destination gone: `failed` at once (the bundle cannot land
  there; its next lookup places it on an active broker), the gone brokers named.
- Owned by nobody read, listed brokers unread (they may own it): `unknown` until
  `move_settle_s` after the unload, then `failed`, naming the brokers that did not answer.
- Owned by nobody, every listed broker read: `unknown` until `move_settle_s`, then `failed`.

Every settlement is counted and audited by the controller like any other. Reading the
active list itself failing (the cluster cannot be reached) leaves the move as it is: the
next check tries again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from balancer.controller.journal import JournalEntry
from balancer.controller.move_steps import NO_MOVER, Answer, move_verdict
from balancer.controller.ports import MovePort
from balancer.core.results import ActionResult
from balancer.pulsar.errors import PulsarAdminError


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who owns a bundle, as far as could be read."""

    owner: str | None
    gone: tuple[str, ...] = ()  # not listed as active and not answering
    unread: tuple[str, ...] = ()  # listed as active, but not answering

    def note(self) -> str:
        parts = []
        if self.gone:
            parts.append(f"left the cluster (not listed, no answer): {', '.join(self.gone)}")
        if self.unread:
            parts.append(f"{len(self.unread)} listed broker(s) unread: {', '.join(self.unread)}")
        return f" ({'; '.join(parts)})" if parts else ""


def read_ownership(mover: MovePort, cluster: str, name: str, first: Sequence[str]) -> Ownership:
    """The owner of bundle `name`, reading `first` (the move's destination and source), then
    every other active broker. PulsarAdminError only when the active list cannot be read."""
    listed = tuple(mover.list_brokers(cluster))
    gone: list[str] = []
    unread: list[str] = []
    for broker in (*first, *(b for b in listed if b not in first)):
        try:
            owned = mover.owned_bundles(cluster, broker)
        except PulsarAdminError:
            (unread if broker in listed else gone).append(broker)
            continue
        if name in owned:
            return Ownership(broker, tuple(gone), tuple(unread))
    return Ownership(None, tuple(gone), tuple(unread))


def settle_verdict(
    seen: Ownership,
    *,
    source: str,
    destination: str,
    answer: Answer,
    age_s: float,
    settle_s: float,
) -> tuple[ActionResult, str]:
    """What the ownership read says of an unload sent `age_s` ago (see the module's doc)."""
    if seen.owner is not None:
        result, detail = move_verdict(
            seen.owner, source=source, destination=destination, answer=answer, age_s=age_s,
            settle_s=settle_s,
        )  # fmt: skip
        return result, detail + seen.note()
    if destination in seen.gone:
        return ActionResult.FAILED, (
            f"its destination {destination} left the cluster (no longer listed as active, "
            f"does not answer) and no broker read owns the bundle{seen.note()}: it cannot "
            "land there; its next lookup places it on an active broker"
        )
    if seen.unread:
        if age_s >= settle_s:
            return ActionResult.FAILED, (
                f"not owned by any broker read {age_s:.0f} s after the unload (past "
                f"controller.move_settle_s, {settle_s:.0f} s){seen.note()}: given up on"
            )
        return ActionResult.UNKNOWN, f"not owned by any broker read yet{seen.note()}"
    result, detail = move_verdict(
        None, source=source, destination=destination, answer=answer, age_s=age_s,
        settle_s=settle_s,
    )  # fmt: skip
    return result, detail + seen.note()


def recheck_move(
    mover: MovePort | None, entry: JournalEntry, *, age_s: float, settle_s: float
) -> tuple[ActionResult, str]:
    """The outcome of an `unknown` move, from ownership (PulsarAdminError if the cluster's
    active brokers cannot be listed)."""
    call = entry.payload.get("call", {})
    if mover is None:
        return move_verdict(
            None, source="", destination="", answer="none", age_s=age_s, settle_s=settle_s
        )
    source, destination = str(call["source"]), str(call["destination_broker"])
    seen = read_ownership(mover, entry.cluster, entry.target, (destination, source))
    answer: Answer = "ok" if entry.payload.get("answer") == "ok" else "none"
    return settle_verdict(
        seen, source=source, destination=destination, answer=answer, age_s=age_s,
        settle_s=settle_s,
    )  # fmt: skip


def reconcile_move(mover: MovePort | None, entry: JournalEntry) -> tuple[ActionResult, str]:
    """The outcome of a move intent a crash left open (PulsarAdminError if the cluster's
    active brokers cannot be listed): the unload may or may not have been sent; it is never
    sent again. Still on its source: `abandoned`; else as a sent unload (nobody owns it yet:
    `unknown`, rechecked each batch; its destination gone: `failed`)."""
    if mover is None:
        return ActionResult.UNKNOWN, NO_MOVER
    call = entry.payload.get("call", {})
    source, destination = str(call["source"]), str(call["destination_broker"])
    seen = read_ownership(mover, entry.cluster, entry.target, (destination, source))
    if seen.owner == source:
        return ActionResult.ABANDONED, f"still owned by its source {source}: never unloaded"
    return settle_verdict(
        seen, source=source, destination=destination, answer="none", age_s=0.0, settle_s=1.0
    )
