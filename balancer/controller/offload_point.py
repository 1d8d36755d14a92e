"""The offload point the controller asks for: the core's size rule over the admin client's stats."""

from __future__ import annotations

from collections.abc import Callable

from balancer.core import offload
from balancer.pulsar.models import InternalStats, MessageId

OffloadPointFn = Callable[[InternalStats, int], MessageId | None]


def ledger_sizes(stats: InternalStats) -> list[offload.LedgerSize]:
    """The admin client's ledgers as the core's offload rule takes them."""
    return [offload.LedgerSize(lg.ledger_id, lg.size, lg.offloaded) for lg in stats.ledgers]


def default_offload_point(stats: InternalStats, threshold_bytes: int) -> MessageId | None:
    """The core's size-threshold rule (`balancer.core.offload`) over the admin client's stats:
    the point comes from the bytes still in BookKeeper (offloaded ledgers count nothing)."""
    return offload.offload_point(ledger_sizes(stats), stats.current_ledger_size, threshold_bytes)
