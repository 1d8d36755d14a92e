"""Ledgers and offloads of every topic: ledgers roll over at a size limit; an offload marks
the closed ledgers below a ledger id and completes after a simulated delay.

Bookkeeping only: bytes written and simulated times are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from balancer.sim.state import SimError
from balancer.sim.stats import Ledger
from balancer.sim.traffic import FloatArray

# Ledger ids of topic i are LEDGER_ID_STRIDE * i + k: unique in the group, increasing per topic.
LEDGER_ID_STRIDE = 1_000_000
INJECTED_OFFLOAD_ERROR = "Injected fault: offload to tiered storage failed"
# The ManagedLedgerException message ManagedLedgerImpl.asyncOffloadPrefix fails with when the
# ledger's offloader is the NullLedgerOffloader (no offload driver configured).
NO_OFFLOADER_ERROR = "NullLedgerOffloader"


@dataclass
class OffloadProgress:
    """One topic's offload as the simulator runs it (what `GET .../offload` reports from;
    `balancer.pulsar.models.OffloadState` is the client's reading of that status)."""

    status: str = "NOT_RUN"  # NOT_RUN | RUNNING | SUCCESS | ERROR
    target_prefix: int = 0  # ledgers [0, target_prefix) offloaded when it completes
    completes_at_s: float = 0.0
    last_error: str = ""
    will_fail: bool = False


class LedgerStore:
    def __init__(
        self,
        *,
        msg_size_bytes: FloatArray,
        ledger_max_size_bytes: int,
        offload_duration_s: float,
        start_ms: int,
    ) -> None:
        self._msg_size_bytes = msg_size_bytes
        self._limit = ledger_max_size_bytes
        self._duration_s = offload_duration_s
        self._start_ms = start_ms
        topics = len(msg_size_bytes)
        self.offloads: dict[int, OffloadProgress] = {}
        self.offloaded_prefix = np.zeros(topics, dtype=np.int64)  # ledgers [0, n) offloaded
        self.last_offload_success_ms = np.zeros(topics, dtype=np.int64)

    def settle(self, now_s: float) -> None:
        """Complete the offloads whose simulated duration has passed by `now_s`."""
        for i, state in self.offloads.items():
            if state.status != "RUNNING" or now_s < state.completes_at_s:
                continue
            if state.will_fail:
                state.status = "ERROR"
                state.last_error = INJECTED_OFFLOAD_ERROR
                continue
            state.status = "SUCCESS"
            if state.target_prefix > int(self.offloaded_prefix[i]):
                self.offloaded_prefix[i] = state.target_prefix
            self.last_offload_success_ms[i] = self._start_ms + int(state.completes_at_s * 1000)

    def ledgers(self, i: int, written_bytes: float) -> tuple[list[Ledger], int]:
        """Topic i's ledgers oldest first (the last is the current one) and the current
        ledger's size, given the bytes ever written to it."""
        closed, current = divmod(int(written_bytes), self._limit)
        size = float(self._msg_size_bytes[i])
        per_ledger_entries = max(int(self._limit // size), 1)
        first = i * LEDGER_ID_STRIDE
        offloaded = int(self.offloaded_prefix[i])
        ledgers = [
            Ledger(first + k, per_ledger_entries, self._limit, k < offloaded) for k in range(closed)
        ]
        ledgers.append(Ledger(first + closed, int(current // size), current, False))
        return ledgers, current

    def offloaded_bytes(self, i: int) -> int:
        return int(self.offloaded_prefix[i]) * self._limit

    def last_offloaded_ledger_id(self, i: int) -> int:
        prefix = int(self.offloaded_prefix[i])
        return i * LEDGER_ID_STRIDE + prefix - 1 if prefix else 0

    def trigger(
        self,
        i: int,
        ledger_id: int,
        *,
        written_bytes: float,
        now_s: float,
        will_fail: bool,
        offloader: bool = True,
    ) -> OffloadProgress:
        """Offload every closed, non-empty, not yet offloaded ledger with id < `ledger_id`
        (never the current one); done `offload_duration_s` later. 409 while one runs
        (PersistentTopic.triggerOffload: AlreadyRunningException)."""
        self.settle(now_s)
        state = self.offloads.setdefault(i, OffloadProgress())
        if state.status == "RUNNING":
            raise SimError(409, "Offload already in progress")
        if not offloader:
            # The 204 is still sent: triggerOffload starts asyncOffloadPrefix, which fails at
            # once; OffloadProcessStatus.forError carries the exception's message.
            state.status, state.last_error, state.will_fail = "ERROR", NO_OFFLOADER_ERROR, True
            return state
        closed = int(written_bytes) // self._limit
        wanted = min(closed, max(ledger_id - i * LEDGER_ID_STRIDE, 0))
        state.last_error = ""
        state.target_prefix = max(wanted, int(self.offloaded_prefix[i]))
        state.status = "RUNNING"
        state.will_fail = will_fail
        state.completes_at_s = now_s + self._duration_s
        self.settle(now_s)
        return state

    def unload(self, topics: Iterable[int]) -> None:
        """The topics were unloaded: the offload status lives in the loaded PersistentTopic
        (its `currentOffload` promise), so the reloaded topic answers NOT_RUN. A running
        offload is dropped with its managed ledger (simplified: its ledgers stay in
        BookKeeper); offloaded ledgers stay offloaded (they are in the ledger metadata)."""
        for i in topics:
            self.offloads.pop(int(i), None)

    def status(self, i: int) -> dict[str, Any]:
        """`GET .../offload`: status, last error and the first message not offloaded.
        ERROR carries MessageId.earliest, as `OffloadProcessStatus.forError` builds it."""
        state = self.offloads.get(i, OffloadProgress())
        first = {
            "ledgerId": i * LEDGER_ID_STRIDE + int(self.offloaded_prefix[i]),
            "entryId": 0,
            "partitionIndex": -1,
        }
        if state.status == "ERROR":
            first = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
        return {
            "status": state.status,
            "lastError": state.last_error,
            "firstUnoffloadedMessage": first,
        }
