"""Rolling a cluster (issue 43, point 4): where each drain of a rolling restart sends its
bundles, given the restart order.

A StatefulSet restarts its pods one at a time from the highest ordinal down, and a broker
that restarts comes back owning nothing. A bundle placed on a broker that has yet to restart
will move again when that broker drains; one placed on a broker that already restarted (or
that is not part of the roll) will not. So a drain prefers, as destinations:

1. the brokers that already restarted, and those outside the order (they never stop);
2. then the brokers still to restart, the LAST to restart first: the first drain, with none
   restarted, sends its bundles to the broker that restarts last; those bundles move a
   second time only at the very end.

Over a full roll of N brokers each bundle moves once when its own broker drains, and the
first broker's bundles once more when the last one drains: (1 + 1/N) x bundles, each at most
twice, plus the final balance (the last broker comes back empty). When the preferred brokers
lack room under the drain's target, the decision falls back to the next tier and names the
bundle (`MovePlan.drain_fallback`): it will move once more when that broker drains.

Purely computational, with no side effects.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

# Issue 43's bound for a roll: no bundle moved more than this. A bundle the roll (its drains
# and the balance meanwhile) moved this often is left out of balance moves until the roll's
# moves stop counting (a drain still moves it: its broker is going away).
MAX_MOVES_IN_ROLL = 2

# A StatefulSet pod is `<set name>-<ordinal>`; its broker id's host starts with the pod's
# name (`pulsar-broker-3.pulsar-broker.pulsar.svc.cluster.local:8080`, or the bare pod name).
_ORDINAL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-(?P<ordinal>\d+)$")


class OrderError(ValueError):
    """A restart order that cannot be inferred or used (the message says why)."""


def ordinal(broker: str) -> int | None:
    """The StatefulSet ordinal of a broker id `host:port` (None: the host is no pod name)."""
    host = broker.rpartition(":")[0] or broker
    match = _ORDINAL.match(host.split(".", 1)[0])
    return int(match.group("ordinal")) if match else None


def statefulset_order(brokers: Iterable[str]) -> tuple[str, ...]:
    """The order a StatefulSet restarts (and scales down) its pods: highest ordinal first.
    OrderError when an id carries no ordinal or two share one (give the order then)."""
    ids = sorted(set(brokers))
    without = [b for b in ids if ordinal(b) is None]
    if without:
        raise OrderError(
            f"no StatefulSet ordinal in {', '.join(without)} (a host `<name>-<ordinal>`): "
            f"give the restart order"
        )
    by_ordinal: dict[int, str] = {}
    for b in ids:
        n = ordinal(b)
        assert n is not None
        if n in by_ordinal:
            raise OrderError(f"{by_ordinal[n]} and {b} have the same ordinal {n}: give the order")
        by_ordinal[n] = b
    return tuple(by_ordinal[n] for n in sorted(by_ordinal, reverse=True))


def check_order(order: Sequence[str]) -> tuple[str, ...]:
    """`order` as a tuple; OrderError when empty or a broker is named twice."""
    if not order:
        raise OrderError("the restart order names no broker")
    twice = sorted({b for b in order if order.count(b) > 1})
    if twice:
        raise OrderError(f"the restart order names {', '.join(twice)} more than once")
    return tuple(order)


def drain_destinations(
    order: Sequence[str], brokers: Collection[str], draining: Collection[str]
) -> tuple[frozenset[str], ...] | None:
    """The drain's destination tiers, most preferred first (see the module's doc), among
    `brokers` (those the cluster lists now) less the draining ones; None when no draining
    broker is in the order (a drain that is not part of the roll: no preference).

    The brokers before the first draining one in the order have restarted; those after it
    are still to restart. Brokers outside the order never stop and rank with the restarted.
    """
    positions = [order.index(b) for b in draining if b in order]
    if not positions:
        return None
    current = min(positions)
    staying = [b for b in brokers if b not in draining]
    later = [b for b in order[current + 1 :] if b in staying]
    settled = frozenset(b for b in staying if b not in later)
    tiers = [settled] + [frozenset({b}) for b in reversed(later)]
    return tuple(t for t in tiers if t)
