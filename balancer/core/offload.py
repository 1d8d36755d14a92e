"""Offload point by size threshold (PIP-416), exactly as pulsar-admin `topics offload -s`.

Keep the newest `threshold_bytes` in BookKeeper and offload the rest: walk the ledgers from
the newest backwards summing their sizes; at the first ledger where the sum exceeds the
threshold, offload up to (not including) the next newer ledger, i.e. message id
`(that ledger's id, entry 0)`. When the newest (current) ledger alone exceeds the threshold,
that is the current ledger itself, so every older ledger is offloaded; if the sum never
exceeds the threshold there is nothing to offload. The current ledger's size is not filled in
by Pulsar: its `currentLedgerSize` is used instead.

Only bytes still in BookKeeper count: a ledger already offloaded adds nothing to the sum.
(pulsar-admin's own walk counts every ledger, but on a topic offloaded before, that finds a
point below which nothing is left to move, and Pulsar's `storageSize` keeps counting offloaded
ledgers until retention deletes them: the point must come from what is still in BookKeeper.)
With no ledger offloaded this is exactly pulsar-admin's rule.

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

__all__ = [
    "InvalidInternalStats",
    "LedgerSize",
    "MessageId",
    "bookkeeper_bytes",
    "offload_point",
    "offload_point_from_stats",
]


class InvalidInternalStats(ValueError):
    """An internal-stats document without the fields the offload rule needs."""


@dataclass(frozen=True, slots=True)
class MessageId:
    """Pulsar's message id; `partition_index` -1 for a non-partitioned topic."""

    ledger_id: int
    entry_id: int
    partition_index: int = -1

    def to_json(self) -> dict[str, int]:
        """The body Pulsar's offload endpoint takes."""
        return {
            "ledgerId": self.ledger_id,
            "entryId": self.entry_id,
            "partitionIndex": self.partition_index,
        }


@dataclass(frozen=True, slots=True)
class LedgerSize:
    ledger_id: int
    size_bytes: int
    offloaded: bool = False  # in tiered storage: no longer takes BookKeeper space


def bookkeeper_bytes(ledgers: Sequence[LedgerSize], current_ledger_size: int) -> int:
    """Bytes still in BookKeeper: ledgers not offloaded, the current one by its own size."""
    if not ledgers:
        return 0
    *closed, _current = ledgers
    return current_ledger_size + sum(lg.size_bytes for lg in closed if not lg.offloaded)


def offload_point(
    ledgers: Sequence[LedgerSize], current_ledger_size: int, threshold_bytes: int
) -> MessageId | None:
    """The message id to offload up to, or None for "nothing to offload".

    `ledgers` are oldest first, the last one being the current ledger, whose size is taken
    from `current_ledger_size`. No ledgers: nothing to offload.
    """
    if threshold_bytes < 0:
        raise ValueError(f"threshold must be >= 0 bytes, got {threshold_bytes}")
    if not ledgers:
        return None
    suffix_bytes = 0
    newer_ledger_id = ledgers[-1].ledger_id
    for index in range(len(ledgers) - 1, -1, -1):
        ledger = ledgers[index]
        if index == len(ledgers) - 1:
            suffix_bytes += current_ledger_size
        elif not ledger.offloaded:
            suffix_bytes += ledger.size_bytes
        if suffix_bytes > threshold_bytes:
            return MessageId(newer_ledger_id, 0)
        newer_ledger_id = ledger.ledger_id
    return None


def offload_point_from_stats(
    internal_stats: Mapping[str, Any], threshold_bytes: int
) -> MessageId | None:
    """`offload_point` on Pulsar's internal-stats JSON (`ledgers`, `currentLedgerSize`)."""
    if not isinstance(internal_stats, Mapping):
        raise InvalidInternalStats("internal stats must be a JSON object")
    raw = internal_stats.get("ledgers")
    if not isinstance(raw, list):
        raise InvalidInternalStats("internal stats have no 'ledgers' list")
    ledgers: list[LedgerSize] = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not _is_int(item.get("ledgerId")):
            raise InvalidInternalStats(f"ledgers[{i}] has no integer 'ledgerId'")
        size = item.get("size", 0)
        if not _is_int(size) or size < 0:
            raise InvalidInternalStats(f"ledgers[{i}] has an invalid 'size' {size!r}")
        offloaded = item.get("offloaded", False)
        if not isinstance(offloaded, bool):
            raise InvalidInternalStats(f"ledgers[{i}] has an invalid 'offloaded' {offloaded!r}")
        ledgers.append(LedgerSize(item["ledgerId"], size, offloaded))
    current = internal_stats.get("currentLedgerSize", 0)
    if not _is_int(current) or current < 0:
        raise InvalidInternalStats(f"invalid 'currentLedgerSize' {current!r}")
    return offload_point(ledgers, current, threshold_bytes)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
