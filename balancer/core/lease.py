"""The single-writer lease as this process sees it: held, and valid only for a while.

One balancer of a peer group may act on Pulsar: the member of a Kafka group that the group
assigned the lease to. A member learns that it was removed from the group (its session
expired while it was paused, say) only at its next round trip with the coordinator, so the
holder keeps a deadline of its own: the lease is valid until the SEND time of the last round
trip that confirmed its membership, plus the session timeout minus a safety margin. The
coordinator cannot have removed the member before that send time plus the session timeout,
so no other balancer can hold the lease before the deadline passes. The times come from a
monotonic clock that keeps running while the process is stopped (CLOCK_MONOTONIC under
SIGSTOP), so a holder that resumes after a pause finds its lease expired before it acts.

Pure: every time is passed in (seconds of one monotonic clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    """What the controller's gate, /readyz and the metrics read."""

    held: bool  # this process may act now
    holder: str | None  # who holds the lease, as last known (this process's identity if held)
    detail: str  # why not, or how long it is still valid; for outcomes, logs and /readyz
    valid_for_s: float = 0.0  # > 0 only while held

    @property
    def role(self) -> str:
        return "holder" if self.held else "standby"

    def as_dict(self) -> dict[str, object]:
        return {
            "role": self.role,
            "held": self.held,
            "holder": self.holder,
            "detail": self.detail,
        }


class LeaseState:
    """The lease's state machine: assigned by the group, confirmed by round trips, revoked.

    Not thread-safe: the adapter that owns it serialises the calls.
    """

    def __init__(self, *, identity: str, validity_s: float) -> None:
        if not validity_s > 0:
            raise ValueError(f"validity_s must be > 0, got {validity_s}")
        self.identity = identity
        self.validity_s = validity_s
        self.assigned = False
        self.confirmed_at_s = -math.inf
        self.holder: str | None = None
        self.reason = "writer lease not acquired yet"

    def assign(self) -> None:
        """The group assigned the lease to this member; valid once a round trip confirms it."""
        if not self.assigned:
            self.assigned = True
            self.confirmed_at_s = -math.inf
        self.holder = self.identity

    def confirm(self, sent_at_s: float) -> None:
        """A round trip SENT at `sent_at_s` confirmed membership (ignored unless assigned)."""
        if self.assigned:
            self.confirmed_at_s = max(self.confirmed_at_s, sent_at_s)

    def revoke(self, reason: str) -> None:
        """The lease is gone (revoked, membership lost, stopping): invalid at once."""
        self.assigned = False
        self.confirmed_at_s = -math.inf
        self.reason = reason
        if self.holder == self.identity:
            self.holder = None

    def observe_holder(self, holder: str | None) -> None:
        """The group told every member who holds the lease now."""
        if not self.assigned:
            self.holder = holder if holder != self.identity else None

    def deadline_s(self) -> float:
        return self.confirmed_at_s + self.validity_s

    def status(self, now_s: float) -> LeaseStatus:
        if self.assigned:
            left_s = self.deadline_s() - now_s
            if left_s > 0:
                return LeaseStatus(
                    held=True,
                    holder=self.identity,
                    detail=f"writer lease held, valid for {left_s:.1f} s",
                    valid_for_s=left_s,
                )
            if self.confirmed_at_s == -math.inf:
                detail = "writer lease assigned, membership not confirmed by Kafka yet"
            else:
                age_s = now_s - self.confirmed_at_s
                detail = (
                    f"writer lease expired: membership last confirmed {age_s:.1f} s ago "
                    f"(valid {self.validity_s:g} s after a confirmation)"
                )
            return LeaseStatus(held=False, holder=None, detail=detail)
        if self.holder is not None:
            return LeaseStatus(
                held=False,
                holder=self.holder,
                detail=f"standby: writer lease held by {self.holder}",
            )
        return LeaseStatus(held=False, holder=None, detail=f"standby: {self.reason}")
