"""Pulsar's own load managers as replay policies: the core's `Policy`s
(`balancer.core.replay.pulsar_policies`, each naming the Java classes it copies) driven by
the engine like `ours`, each on its own `ReplayLayout` that follows the recording's rounds.

The windows they read (`ReplayWindow`: every topic's windowed load with its broker, and each
cluster's newest round at or before the window's end) are built once per window from the
stream's closed rows and shared by every core policy. The stream keeps no broker per topic:
a topic's broker is the recorded owner of its bundle in that round.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import groupby

from balancer.app.config import BalancerConfig
from balancer.app.replay.engine import PolicyWrapper
from balancer.app.replay.windows import ClosedWindow
from balancer.core.load import TopicLoad
from balancer.core.replay.layout import ReplayLayout
from balancer.core.replay.policy import Policy
from balancer.core.replay.pulsar_policies import pulsar_policies
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.result import (
    POLICY_PULSAR_THRESHOLD,
    POLICY_PULSAR_TRANSFER,
    POLICY_PULSAR_UNIFORM,
    ReplayAction,
    WindowSample,
)
from balancer.core.replay.window import ReplayWindow, WindowTopic

PULSAR_POLICIES: tuple[str, ...] = (
    POLICY_PULSAR_THRESHOLD,
    POLICY_PULSAR_UNIFORM,
    POLICY_PULSAR_TRANSFER,
)


class SharedWindows:
    """The recording's rounds, and the `ReplayWindow` of the window being replayed (built
    once for every core policy)."""

    def __init__(self) -> None:
        self._rounds: dict[str, list[RoundContext]] = {}  # cluster -> its last two rounds
        self._seen: set[tuple[str, int]] = set()
        self._built: tuple[int, ReplayWindow] | None = None

    def observe(self, context: RoundContext) -> None:
        key = (context.cluster, context.round_ms)
        if key in self._seen:  # every policy is handed each round: keep it once
            return
        self._seen.add(key)
        rounds = self._rounds.setdefault(context.cluster, [])
        rounds.append(context)
        del rounds[:-2]  # a window needs its newest round at or before its end only

    def _newest(self, end_ms: int) -> dict[str, RoundContext]:
        out = {}
        for cluster, rounds in self._rounds.items():
            before = [r for r in rounds if r.round_ms <= end_ms]
            if before:
                out[cluster] = before[-1]
        return out

    def of(self, window: ClosedWindow) -> ReplayWindow:
        if self._built is not None and self._built[0] == window.end_ms:
            return self._built[1]
        contexts = self._newest(window.end_ms)
        recorded = ReplayLayout.from_contexts(contexts.values())
        # The stream's rows come grouped by (cluster, namespace) and sorted by position: each
        # group's topics take their brokers bundle by bundle (one lookup per bundle, not per
        # topic), and the window is built from the groups as they are.
        grouped: dict[tuple[str, str], list[WindowTopic]] = {}
        for (cluster, namespace), rows in groupby(window.topic_loads(), key=_namespace_key):
            loads = [load for _, _, load in rows]
            grouped[(cluster, namespace)] = _with_brokers(recorded, cluster, namespace, loads)
        built = ReplayWindow.from_namespaces(window.end_ms, grouped, contexts)
        self._built = (window.end_ms, built)
        return built


def _namespace_key(row: tuple[str, str, TopicLoad]) -> tuple[str, str]:
    return row[0], row[1]


def _with_brokers(
    recorded: ReplayLayout, cluster: str, namespace: str, loads: Sequence[TopicLoad]
) -> list[WindowTopic]:
    """The topics of one namespace (sorted by position), each with the recorded owner of the
    bundle holding it ("" when none: `ReplayLayout.owner_of`)."""
    c = recorded.clusters.get(cluster)
    layout = c.namespaces.get(namespace) if c else None
    if c is None or layout is None:
        return [WindowTopic(cluster, load, "") for load in loads]
    positions = [load.position for load in loads]
    out: list[WindowTopic] = []
    start = 0
    for bundle in layout.bundles:
        # NamespaceBundles.find: the greatest boundary <= position; 0xffffffff in the last.
        end = (
            bisect_right(positions, bundle.upper, lo=start)
            if bundle.is_last
            else bisect_left(positions, bundle.upper, lo=start)
        )
        broker = c.owners.get(bundle.key(namespace)) or ""
        out.extend(WindowTopic(cluster, load, broker) for load in loads[start:end])
        start = end
    out.extend(WindowTopic(cluster, load, "") for load in loads[start:])  # none expected
    return out


class CorePolicy(PolicyWrapper[Policy]):
    """A core `Policy` as the engine drives it: its layout follows every recorded round and
    starts from the first."""

    def __init__(self, policy: Policy, shared: SharedWindows) -> None:
        super().__init__(policy)
        self.shared = shared
        self.layout = ReplayLayout()

    def observe(self, context: RoundContext) -> None:
        self.shared.observe(context)
        self.layout.follow(context)

    def handle_at_ms(self, window_end_ms: int) -> int:
        return window_end_ms  # Pulsar's leader acts on the loads it has at the window's end

    def step(self, window: ClosedWindow) -> tuple[list[ReplayAction], WindowSample]:
        replay_window = self.shared.of(window)
        actions = self.policy.step(replay_window, self.layout)
        return actions, self.layout.sample(replay_window)

    def close(self) -> None:
        return None


def pulsar_replay_policies(
    names: Sequence[str], config: BalancerConfig, shared: SharedWindows | None = None
) -> list[CorePolicy]:
    """The named Pulsar policies, with Pulsar's defaults, on the config's window length."""
    shared = shared or SharedWindows()
    by_name = {p.name: p for p in pulsar_policies(window_s=config.spark.window_s)}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"no Pulsar policy named {', '.join(unknown)}")
    return [CorePolicy(by_name[n], shared) for n in names]
