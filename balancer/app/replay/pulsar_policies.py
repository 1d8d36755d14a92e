"""Pulsar's own load managers as replay policies: the core's `Policy`s
(`balancer.core.replay.pulsar_policies`, each naming the Java classes it copies) driven by
the engine like `ours`, each on its own `ReplayLayout` that follows the recording's rounds.

The windows they read (`ReplayWindow`: every topic's windowed load with its broker, and each
cluster's newest round at or before the window's end) are built once per window from the
stream's closed rows and shared by every core policy, as numpy columns per namespace (no
object per topic: `balancer.core.replay.window`). The stream keeps no broker per topic: a
topic's broker is the recorded owner of its bundle in that round.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from balancer.app.config import BalancerConfig
from balancer.app.replay.engine import PolicyWrapper
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
from balancer.core.replay.window import LOAD_COLUMNS, NamespaceWindow, ReplayWindow

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
        recorded = ReplayLayout()  # each round's recorded layout, built once for it
        for cluster, context in sorted(contexts.items()):
            recorded.clusters[cluster] = ReplayLayout.recorded(context).clusters[cluster]
        namespaces = namespace_columns(window.topic_rows(), recorded)
        built = ReplayWindow(window.end_ms, namespaces, contexts)
        self._built = (window.end_ms, built)
        return built


def namespace_columns(
    rows: pa.Table, recorded: ReplayLayout
) -> dict[tuple[str, str], NamespaceWindow]:
    """Each (cluster, namespace)'s topics of `rows` (the stream's closed rows, one per topic,
    sorted by cluster, namespace, position, topic: `ClosedWindow.topic_rows`) as columns:
    numpy views of the rows' columns, no object per topic; each topic's broker the recorded
    owner of its bundle, given bundle by bundle."""
    if rows.num_rows == 0:
        return {}
    for name in ("cluster", "namespace", "topic", "position", *LOAD_COLUMNS):
        nulls = rows.column(name).null_count
        if nulls:  # the stream's rows always hold a value: a defect, not bad input
            raise ValueError(f"closed rows: {nulls} null(s) in column {name!r}")
    # The runs of equal (cluster, namespace), found on dictionary codes (no str per row).
    codes = []
    for name in ("cluster", "namespace"):
        encoded = rows.column(name).combine_chunks().dictionary_encode()
        codes.append((encoded.indices.to_numpy(), encoded.dictionary.to_pylist()))
    (cluster_codes, cluster_names), (ns_codes, ns_names) = codes
    changed = (cluster_codes[1:] != cluster_codes[:-1]) | (ns_codes[1:] != ns_codes[:-1])
    starts = [0, *(np.flatnonzero(changed) + 1).tolist()]
    names = rows.column("topic").to_pylist()
    positions = rows.column("position").to_numpy()
    columns = {name: rows.column(name).to_numpy() for name in LOAD_COLUMNS}
    out: dict[tuple[str, str], NamespaceWindow] = {}
    for start, end in pairwise([*starts, rows.num_rows]):
        key = cluster, namespace = cluster_names[cluster_codes[start]], ns_names[ns_codes[start]]
        if key in out:  # sorted rows hold each namespace in one run
            raise ValueError(f"closed rows: {cluster}/{namespace} not sorted together")
        part = slice(start, end)
        out[key] = NamespaceWindow.of_columns(
            cluster,
            namespace,
            names=names[part],
            positions=positions[part],
            columns={name: column[part] for name, column in columns.items()},
            brokers=_brokers(recorded, cluster, namespace, positions[part]),
        )
    return out


def _brokers(
    recorded: ReplayLayout, cluster: str, namespace: str, positions: npt.NDArray[np.int64]
) -> list[str]:
    """The recorded owner of the bundle holding each topic of one namespace (positions
    sorted), "" when none (`ReplayLayout.owner_of`); one lookup per bundle."""
    c = recorded.clusters.get(cluster)
    layout = c.namespaces.get(namespace) if c else None
    if c is None or layout is None:
        return [""] * len(positions)
    out: list[str] = []
    start = 0
    for bundle in layout.bundles:
        # NamespaceBundles.find: the greatest boundary <= position; 0xffffffff in the last.
        side: Literal["left", "right"] = "right" if bundle.is_last else "left"
        end = int(np.searchsorted(positions, bundle.upper, side=side))
        out += [c.owners.get(bundle.key(namespace)) or ""] * max(0, end - start)
        start = max(start, end)
    out += [""] * (len(positions) - start)  # none expected
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
