"""A lower bound on moves that takes the final mean, not minute 0's, for clusters of two
broker sizes (issue 41's mixed-capacity): `bench.broker_balance.moves_lower_bound` uses
minute 0's mean, a valid but loose bound where load moves to cheaper brokers and the mean
falls with it.

Where it holds: every broker's load is its cpu (for every bundle on every broker the cpu
cost is at least its bandwidth in and out, so sums keep cpu the largest and a broker's
load is the sum of its bundles' costs), and the brokers form two classes, E (expensive)
and C, with each bundle's cost on a C broker k < 1 times its cost on an E broker.

Proof. Let n brokers, e of them in E, T0 the total load at minute 0, L_E the E brokers'
total. In a balanced final state let S be the E-cost of the E-origin bundles that end on C
brokers, and B the C-cost of the C-origin bundles that end on E brokers (moves within a
class keep costs). Then the E brokers' final total is L_E - S + B / k and the final mean
m = (T0 - (1 - k) S + (1 / k - 1) B) / n. Balanced means every E broker <= m + margin, so
summed: L_E - S + B / k <= e m + e margin, i.e. S >= S0 + beta B with
S0 = (L_E - e T0 / n - e margin) / (1 - e (1 - k) / n) and beta = ((1 - e / n) / k + e / n)
/ (1 - e (1 - k) / n) > 0. Putting that into m, B's coefficient is (1 / k - 1) -
(1 - k) beta = 0, so m <= m* = (T0 - (1 - k) S0) / n whenever S0 > 0. Every broker i then
ends at most min(m* + margin, overload); it ends at least L_i minus the load of its own
bundles that left (arrivals only add), and shedding a given load takes the fewest bundles
largest first. The sum of those counts is a lower bound on moves.
"""

from __future__ import annotations

from balancer.core.moves.model import MoveSettings
from bench.broker_cluster import ClusterScenario, ClusterState

EPSILON = 1e-9


def _two_class_ratio(scenario: ClusterScenario) -> tuple[set[str], float] | None:
    """(the E brokers, k) where the proof's conditions hold, else None."""
    state = ClusterState.start(scenario)
    classes: dict[tuple[float, float], list[str]] = {}
    for spec in scenario.brokers:
        key = (spec.cores * spec.msgs_per_core, spec.cores * spec.bytes_per_core)
        classes.setdefault(key, []).append(spec.broker)
    if len(classes) != 2 or not scenario.bundles:
        return None
    for spec in scenario.brokers:
        for bundle in scenario.bundles:
            cpu = spec.cpu_ratio(bundle.rates.msg_rate, bundle.rates.throughput_bytes)
            nic = max(bundle.rates.throughput_in, bundle.rates.throughput_out) / spec.nic_bytes
            if nic > cpu + EPSILON:
                return None  # a bandwidth-bound state is possible: load is not linear
    (a_key, a), (b_key, b) = sorted(classes.items())
    # a: the smaller brokers (E); every bundle costs k = cost on b / cost on a there.
    ratios = {
        round(state.bundle_load_on(x, b[0]) / state.bundle_load_on(x, a[0]), 9)
        for x in scenario.bundles
        if state.bundle_load_on(x, a[0]) > 0
    }
    if len(ratios) != 1 or a_key == b_key:
        return None
    k = ratios.pop()
    return (set(a), k) if 0 < k < 1 else None


def moves_lower_bound_final_mean(scenario: ClusterScenario, settings: MoveSettings) -> int | None:
    """The bound of the module docstring; None where its conditions do not hold or S0 <= 0
    (then minute 0's mean is the tighter ceiling)."""
    found = _two_class_ratio(scenario)
    if found is None:
        return None
    expensive, k = found
    state = ClusterState.start(scenario)
    loads = state.loads()
    n, e = len(loads), len(expensive)
    total = sum(loads.values())
    load_e = sum(loads[b] for b in expensive)
    s0 = (load_e - e * total / n - e * settings.margin) / (1 - e * (1 - k) / n)
    if s0 <= 0:
        return None
    ceiling = min((total - (1 - k) * s0) / n + settings.margin, settings.overload_ratio)
    moves = 0
    for broker, load in loads.items():
        excess = load - ceiling
        own = sorted(
            (state.bundle_load_on(x, broker) for x in state.bundles_of(broker)), reverse=True
        )
        for size in own:
            if excess <= EPSILON:
                break
            excess -= size
            moves += 1
    return moves


def rollout_moves_lower_bound(
    scenario: ClusterScenario, order: tuple[str, ...], settings: MoveSettings
) -> int:
    """The fewest moves of a rolling restart (every broker restarted once, in `order`, each
    back owning nothing) that ends balanced with no bundle moved more than twice, on one
    broker size where a broker's load is the sum of its bundles' (the rollout scenarios).

    Proof. Every bundle moves at least once: its broker restarts and must own nothing then.
    A bundle of the first broker to restart moves at least twice: when that broker stops no
    broker has restarted yet, so its first destination restarts later and it moves again.
    The last broker to restart comes back owning nothing; ending balanced, it must carry at
    least mean - margin (`is_balanced`: no broker under it beside one over the mean, and the
    total load, so the mean, does not change), and every bundle it owns then arrived after
    its restart, one move more than the above: a bundle of one of the other brokers
    (2 moves in all), since one of the first broker's would need a third. So moves >=
    bundles + (the first broker's bundles) + k, k the fewest bundles not of the first broker
    that carry mean - margin, largest first. `bench.broker_rollout`'s issue 43 bound takes
    the largest of ALL bundles for k; it is lower where the first broker's are among them."""
    state = ClusterState.start(scenario)
    first, last = order[0], order[-1]
    loads = state.loads()
    need = sum(loads.values()) / len(loads) - settings.margin
    first_bundles = state.bundles_of(first)
    others = sorted(
        (state.bundle_load_on(b, last) for b in scenario.bundles if b not in first_bundles),
        reverse=True,
    )
    fill = 0
    for size in others:
        if need <= EPSILON:
            break
        need -= size
        fill += 1
    return len(scenario.bundles) + len(first_bundles) + fill
