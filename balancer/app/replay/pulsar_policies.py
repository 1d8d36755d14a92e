"""Pulsar's own load managers as replay policies: the core's `Policy`s
(`balancer.core.replay.pulsar_policies`, each naming the Java classes it copies) driven by
the engine like `ours`, each on its own `ReplayLayout` that follows the recording's rounds.

The windows they read (`ReplayWindow`: every topic's windowed load with its broker, and each
cluster's newest round at or before the window's end) are built once per window from the
stream's closed rows and shared by every core policy. The stream keeps no broker per topic:
a topic's broker is the recorded owner of its bundle in that round.
"""

from __future__ import annotations

from collections.abc import Sequence

from balancer.app.config import BalancerConfig
from balancer.app.replay.windows import ClosedWindow
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
        topics = [
            WindowTopic(cluster, load, recorded.owner_of(cluster, namespace, load.position) or "")
            for cluster, namespace, load in window.topic_loads()
        ]
        built = ReplayWindow.build(window.end_ms, topics, contexts)
        self._built = (window.end_ms, built)
        return built


class CorePolicy:
    """A core `Policy` as the engine drives it: its layout follows every recorded round and
    starts from the first."""

    def __init__(self, policy: Policy, shared: SharedWindows) -> None:
        self.policy = policy
        self.shared = shared
        self.layout = ReplayLayout()

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def description(self) -> str:
        return self.policy.description

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
