"""Filling an idle broker with the fewest moves: a small search over the candidate bundles.

An idle broker (under `mean - margin` beside busy ones, `decide.is_balanced`) is balanced
once it carries `mean - margin`. Filling it bundle after bundle, each source to the mean,
ends each source's share with the smallest bundle that covers the rest: on even layouts that
is a small bundle per source, and a move more than the fewest that reach the target (the
rolling restart's final balance, `bench.broker_rollout`: 23 moves where 21 do).

`fewest_fill` picks the set of candidate moves into ONE idle broker with the fewest moves
whose load lifts it to its need without pushing it over its target, each source kept at or
over `mean - margin` (a source may give more than down to the mean: it stays balanced) and
within its move budget. The count includes the moves each source over its target still
needs after the set (its excess must go somewhere). Among as few moves: fewer bundles in
grace, fewer bundles, one passing the need by `SLACK`, the least load moved, the fewest
sessions, then the candidates' order (largest, then name). A depth-first search over the
candidates largest first, cut where the largest left cannot reach the need or the smallest
left would pass the room; it stops after `NODE_BUDGET` nodes (deterministic: a count, not a
clock) with the best set found. At most one bundle of a bare range among this cycle's moves.

`fill_moves` gives the decision its moves: candidates are the bundles movable now and those
whose grace period ends within `MAX_WAIT_S`; where waiting for some of those takes fewer
moves, only the planned ones movable now go (a rolling restart frees one broker's bundles a
minute). It tries the sources' whole room and only what the sources over target shed
anyway, and takes the fewer moves. When no set reaches the need, the largest bundles that
fit go, largest first: each move then carries the most load.

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import fsum
from typing import TYPE_CHECKING

from balancer.core.moves.drain import DrainMove
from balancer.core.moves.model import BundleState
from balancer.core.moves.placement import is_system_namespace
from balancer.core.rollout import MAX_MOVES_IN_ROLL

if TYPE_CHECKING:  # decide.py calls this module with its running state
    from balancer.core.moves.decide import _Cycle

EPSILON = 1e-9  # as decide.EPSILON: a load within this of a bound is at the bound
NODE_BUDGET = 20_000  # search nodes per fill: ample for tens of candidates of ~20 moves
PLAN_MAX_MOVES = 64  # the most moves a fill plans over this cycle and later ones
# Among sets of as few moves, one that passes the need by this much first: the next window
# re-measures the loads, and a set that only just reaches the need then falls short by a
# move (restart 5: 23 moves where 22 do).
SLACK = 0.005
# A fill waits for a bundle in its grace period only if the grace ends within this: a
# rolling restart frees one broker's bundles a minute; a longer wait leaves the idle broker
# idle for longer than the move it saves is worth (bench.broker_fill_check: 142 of 4,000
# clusters balanced up to 29 min later with no cap).
MAX_WAIT_S = 300.0


@dataclass(frozen=True, slots=True)
class FillItem:
    """A candidate move into the idle broker."""

    name: str  # the bundle's name (ties break by it: the plan does not depend on input order)
    source: str
    gain: float  # its load on the idle broker: what the fill gains
    cost: float  # its load on the source: what the source sheds
    sessions: int = 0
    ready: bool = True  # movable this cycle (False: in its grace period, a later cycle's)
    # Its bare range: at most one bundle of a range moves in a cycle (the modular load
    # manager keeps one destination per range); "" for none.
    range_key: str = ""


@dataclass(frozen=True, slots=True)
class FillLimits:
    """What a fill may do: reach `need` (load to add), add at most `room`, at most
    `max_moves` moves; each source sheds at most `source_room[s]` and moves out at most
    `source_moves[s]` bundles (absent: none). `source_min[s]`: the excess of a source over
    its target, which it sheds anyway (the search counts the moves that will take)."""

    need: float
    room: float
    max_moves: int
    source_room: Mapping[str, float]
    source_moves: Mapping[str, int]
    source_min: Mapping[str, float] = field(default_factory=dict)


def _order(items: Sequence[FillItem]) -> list[FillItem]:
    return sorted(items, key=lambda i: (-i.gain, i.sessions, i.name))


def _still_needed(
    over: Mapping[str, list[tuple[float, int]]], excess: Mapping[str, float],
    shed: Mapping[str, float], chosen: set[int],
) -> int:  # fmt: skip
    """The moves each source over its target still needs once the chosen ones are made:
    its largest bundles left that cover the rest of its excess (one more where they
    cannot)."""
    needed = 0
    for source, rest in excess.items():
        rest -= shed.get(source, 0.0)
        for cost, index in over.get(source, ()):
            if rest <= EPSILON:
                break
            if index not in chosen:
                rest -= cost
                needed += 1
        needed += rest > EPSILON
    return needed


@dataclass(frozen=True, slots=True)
class FillChoice:
    """A fill: its moves, and with them the moves the sources over target still need."""

    items: tuple[FillItem, ...]
    moves: int  # len(items) + those still needed
    load: float  # the load the items move


def fewest_fill(
    items: Sequence[FillItem], limits: FillLimits, node_budget: int = NODE_BUDGET
) -> FillChoice | None:
    """The moves whose gains reach `limits.need` within the limits in the fewest moves,
    counting with them the moves each source over its target (`source_min`) still needs
    after them (its excess must go somewhere: one of its bundles in the fill saves a move
    later); then the least load moved, then the fewest sessions. Largest first; None when
    no set reaches the need (or none was found within `node_budget` nodes)."""
    if limits.need <= EPSILON:
        return FillChoice((), 0, 0.0)
    ordered = [
        i
        for i in _order(items)
        if i.gain > 0.0
        and limits.source_moves.get(i.source, 0) > 0
        and i.cost <= limits.source_room.get(i.source, 0.0) + EPSILON
        and i.gain <= limits.room + EPSILON
    ]
    gains = [i.gain for i in ordered]
    count = len(ordered)
    # tail[j]: the sum of the j smallest gains (the last j in the order).
    tail = [0.0] * (count + 1)
    for j in range(1, count + 1):
        tail[j] = tail[j - 1] + gains[count - j]
    over: dict[str, list[tuple[float, int]]] = {}
    for index, item in enumerate(ordered):
        if item.source in limits.source_min:
            over.setdefault(item.source, []).append((item.cost, index))
    for costs in over.values():
        costs.sort(key=lambda c: (-c[0], c[1]))
    nodes = 0
    best: tuple[tuple[int, int, int, bool, float, int], list[int]] | None = None
    chosen: list[int] = []
    shed: dict[str, float] = {}
    taken: dict[str, int] = {}
    ranges: set[str] = set()  # those of the chosen items movable this cycle

    def search(size: int, start: int, total: float, sessions: int) -> None:
        nonlocal nodes, best
        left = size - len(chosen)
        if left == 0:
            if total >= limits.need - EPSILON:
                moves = size + _still_needed(over, limits.source_min, shed, set(chosen))
                waiting = sum(not ordered[k].ready for k in chosen)
                short = total < limits.need + SLACK - EPSILON
                rank = (moves, waiting, size, short, total, sessions)
                if best is None or rank < best[0]:
                    best = (rank, list(chosen))
            return
        for k in range(start, count - left + 1):
            if nodes >= node_budget:
                return
            nodes += 1
            # The largest `left` from k on: short of the need, and so is any later k.
            if total + fsum(gains[k : k + left]) < limits.need - EPSILON:
                return
            smallest = total + tail[left]  # the `left` smallest of all: a floor
            if smallest > limits.room + EPSILON:
                return
            if (
                best is not None
                and best[0][0] <= size
                and best[0][1:4] == (0, size, False)
                and smallest > best[0][4] + EPSILON
            ):
                return  # no set of this size has fewer moves, nor one as few with less load
            item = ordered[k]
            if total + item.gain > limits.room + EPSILON:
                continue
            if shed.get(item.source, 0.0) + item.cost > (
                limits.source_room.get(item.source, 0.0) + EPSILON
            ) or taken.get(item.source, 0) >= limits.source_moves.get(item.source, 0):
                continue
            key = item.range_key if item.ready else ""
            if key and key in ranges:
                continue
            chosen.append(k)
            shed[item.source] = shed.get(item.source, 0.0) + item.cost
            taken[item.source] = taken.get(item.source, 0) + 1
            if key:
                ranges.add(key)
            search(size, k + 1, total + item.gain, sessions + item.sessions)
            chosen.pop()
            shed[item.source] -= item.cost
            taken[item.source] -= 1
            ranges.discard(key)

    for size in range(1, min(limits.max_moves, count) + 1):
        if best is not None and best[0][0] <= size:
            break  # a larger set has at least `size` moves
        if fsum(gains[:size]) < limits.need - EPSILON:
            continue  # even the largest `size` fall short
        search(size, 0, 0.0, 0)
        if nodes >= node_budget:
            break
    if best is None:
        return None
    (moves, _, _, _, load, _), indexes = best
    return FillChoice(tuple(ordered[k] for k in indexes), moves, load)


def largest_fill(items: Sequence[FillItem], limits: FillLimits) -> tuple[FillItem, ...]:
    """Largest first, each that fits the limits, until the need is reached or none fits: the
    fill when no set reaches the need (each move carries the most load)."""
    out: list[FillItem] = []
    total = 0.0
    shed: dict[str, float] = {}
    taken: dict[str, int] = {}
    ranges: set[str] = set()
    for item in _order(items):
        if len(out) >= limits.max_moves or total >= limits.need - EPSILON:
            break
        if item.gain <= 0.0 or total + item.gain > limits.room + EPSILON:
            continue
        if shed.get(item.source, 0.0) + item.cost > limits.source_room.get(
            item.source, 0.0
        ) + EPSILON or taken.get(item.source, 0) >= limits.source_moves.get(item.source, 0):
            continue
        if item.range_key and item.range_key in ranges:
            continue
        ranges.add(item.range_key)
        out.append(item)
        total += item.gain
        shed[item.source] = shed.get(item.source, 0.0) + item.cost
        taken[item.source] = taken.get(item.source, 0) + 1
    return tuple(out)


def _grace_left_ms(cycle: _Cycle, bundle: BundleState) -> float:
    last = bundle.last_moved_ms
    return 0.0 if last is None else last + cycle.settings.grace_period_s * 1000.0 - cycle.now_ms


def _candidates(cycle: _Cycle, idle: str, sources: list[str]) -> list[FillItem]:
    """The bundles of `sources` the idle broker may take, this cycle or once their grace
    period is over within `MAX_WAIT_S` (moved this cycle, their roll's share, pinned or
    with a move of their range in flight: not at all)."""
    settings = cycle.settings
    items: list[FillItem] = []
    for source in sources:
        for bundle in cycle.owned(source):
            cost = cycle.load_on(bundle, source)
            if (
                bundle.pinned
                or is_system_namespace(bundle.namespace)
                or cost < settings.min_bundle_load_ratio
                or bundle.name in cycle.moved
                or bundle.moves_in_roll >= MAX_MOVES_IN_ROLL
                or not cycle.movable(bundle)
                or idle not in cycle.destinations(bundle, source)
            ):
                continue
            ready = cycle.rested(bundle)
            if not ready and _grace_left_ms(cycle, bundle) > MAX_WAIT_S * 1000.0:
                continue  # not worth an idle broker's wait
            # As the move would change the loads now (cpu and bandwidth apart, the floor),
            # not the bundle's own load: the set's sum is an estimate, checked as it goes.
            gain = cycle.after(bundle, idle, 1.0) - cycle.loads[idle]
            cost = cycle.loads[source] - cycle.after(bundle, source, -1.0)
            items.append(
                FillItem(
                    bundle.name,
                    source,
                    gain,
                    cost,
                    bundle.sessions,
                    ready,
                    str(bundle.bundle),
                )
            )
    return items


def fill_moves(cycle: _Cycle, idle: str, low: float, high: float) -> list[DrainMove] | None:
    """Moves into the idle broker (applied to `cycle`): of the fewest that lift it to `low`
    (mean - margin) within `high` (its target), from the brokers above the mean, each kept
    at or over `low`, counting the moves each over `high` still needs after them. The fewest
    among the bundles movable now, unless counting those whose grace period ends within
    `MAX_WAIT_S` too takes fewer moves: then the
    planned ones movable now go and the rest wait for their grace to end (a rolling
    restart frees one broker's bundles a minute; [] when all of them wait). Where no set
    reaches `low`, the largest movable that fit; None when there are none (the decision's
    own fill then tries). Each move is checked again on the cycle's state before it
    is applied (placement rules, topic limit, the budgets, the decision's move rule: the
    busier of the two ends under the source's load before), and skipped if it fails."""
    settings = cycle.settings
    active = cycle.active_loads()
    mean = fsum(active[b] for b in sorted(active)) / len(active)
    sources = sorted(b for b in active if b != idle and active[b] > mean + EPSILON)
    items = _candidates(cycle, idle, sources)
    budget = settings.max_moves_per_broker
    excess = {s: active[s] - high for s in sources if active[s] > high + EPSILON}
    # Down to `low` from any source above the mean, or only from what the sources over
    # their target shed anyway (each such move does two jobs: several idle brokers beside
    # several busy ones fill in the fewest moves), whichever needs fewer moves in all.
    now = [i for i in items if i.ready]
    options: list[tuple[tuple[int, int, float], int, FillChoice, bool]] = []
    limits = None
    for tier, room in enumerate(({s: active[s] - low for s in sources}, excess)):
        plan = FillLimits(
            need=low - active[idle],
            room=high - active[idle],
            max_moves=PLAN_MAX_MOVES,
            source_room=room,
            source_moves=dict.fromkeys(sources, PLAN_MAX_MOVES),
            source_min=excess,
        )
        cycle_limits = replace(
            plan,
            max_moves=min(
                settings.max_moves_per_cluster - cycle.moves, budget - cycle.moves_of[idle]
            ),
            source_moves={s: budget - cycle.moves_of[s] for s in sources},
        )
        limits = limits or cycle_limits
        # Those movable now first at equal count: waiting for a grace period must save moves.
        for waits, choice in ((0, fewest_fill(now, cycle_limits)), (1, fewest_fill(items, plan))):
            if choice is not None:
                options.append(((choice.moves, waits, choice.load), tier, choice, waits == 1))
    if options:
        _, _, best, waits = min(options, key=lambda o: (o[0], -o[1]))
        chosen: Sequence[FillItem] = [i for i in best.items if i.ready] if waits else best.items
    else:
        assert limits is not None
        chosen = largest_fill(now, limits)
        if not chosen:
            return None
    out: list[DrainMove] = []
    for item in chosen:
        bundle = cycle.bundles[item.name]
        source = cycle.owner[item.name]
        before = cycle.loads[source]
        source_after = cycle.after(bundle, source, -1.0)
        dest_after = cycle.after(bundle, idle, 1.0)
        if (
            cycle.moves >= settings.max_moves_per_cluster
            or max(cycle.moves_of[source], cycle.moves_of[idle]) >= budget
            or not cycle.movable(bundle)  # another of its range moved in this fill
            or idle not in cycle.destinations(bundle, source)
            or max(source_after, dest_after) >= before - EPSILON
            or dest_after > max(high, source_after) + EPSILON
        ):
            continue
        on_source, before_dst = cycle.load_on(bundle, source), cycle.loads[idle]
        after_src, after_dst = cycle.apply(bundle, source, idle)
        out.append(
            DrainMove(bundle, source, idle, on_source, before, before_dst, after_src, after_dst)
        )
    return out
