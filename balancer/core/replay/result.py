"""What a replay produces: per policy, the actions it took and, per closed window, the load
its own layout carried. The report (text, JSON, HTML) is computed from these alone, so the
engine and the report meet here and nowhere else.

Times are event times in milliseconds since the epoch (the recording's, never the wall
clock); loads are ratios of a limit (1.0 = at the limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class ActionKind(StrEnum):
    SPLIT = "split"  # a bundle split into children (ours: one step; Pulsar: its algorithm)
    MOVE = "move"  # a bundle unloaded from one broker and owned by another
    OFFLOAD = "offload"  # a topic's ledgers offloaded to tiered storage


# The policies a replay runs by default; a replay may run a subset (`--policies`).
POLICY_OURS = "ours"
POLICY_PULSAR_THRESHOLD = "pulsar-modular-threshold"  # ThresholdShedder (modular default)
POLICY_PULSAR_UNIFORM = "pulsar-modular-uniform"  # UniformLoadShedder
POLICY_PULSAR_TRANSFER = "pulsar-extensible-transfer"  # TransferShedder (extensible)


@dataclass(frozen=True, slots=True)
class ReplayAction:
    """One action a policy took, at the event time it took it."""

    at_ms: int
    cluster: str
    kind: ActionKind
    subject: str  # bundle `tenant/ns/0x..._0x..` (split, move) or full topic name (offload)
    source_broker: str | None = None  # move: the broker it left
    destination_broker: str | None = None  # move: the broker that owns it after
    children: tuple[str, ...] = ()  # split: the children's ranges `0x.._0x..`, in order
    # Clients reconnected by the action: producers + consumers of the bundle's topics in the
    # window it was decided on (a move reconnects them all; so does a split under Pulsar,
    # whose children are unloaded and owned anew).
    sessions_moved: int = 0
    reason: str = ""  # the policy's own words: split reason, shedder rule, drain, ...


@dataclass(frozen=True, slots=True)
class WindowSample:
    """One closed window as the policy's layout carried it."""

    window_end_ms: int
    # `cluster/broker` -> the broker's load ratio (the max over its resources, as the
    # load manager reads it; 0.85 is Pulsar's overload threshold).
    broker_load: Mapping[str, float]
    # `cluster/tenant/ns/0x.._0x..` -> the bundle's load as a ratio of its tightest limit
    # (topics, sessions, msg rate, bandwidth); only bundles at or over 1.0 are listed.
    bundles_over: Mapping[str, float] = field(default_factory=dict)
    bundles: int = 0  # bundles in the layout at this window, all clusters


@dataclass(frozen=True, slots=True)
class PolicyRun:
    """One policy's whole replay."""

    policy: str  # POLICY_OURS, POLICY_PULSAR_*, or a name given with --config
    description: str  # what ran, e.g. "ThresholdShedder + range_equally_divide (defaults)"
    actions: tuple[ReplayAction, ...]
    windows: tuple[WindowSample, ...]  # in event-time order, one per closed window


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A replay of one recording through every policy asked for."""

    source: str  # where the recording came from: a directory, or `kafka:<topic>`
    start_ms: int  # first window end replayed
    end_ms: int  # last window end replayed
    window_s: int  # the windows' length as `run` closes them
    clusters: tuple[str, ...]
    topics: int  # distinct topics seen
    samples: int  # topic samples read
    samples_rejected: Mapping[str, int]  # reason -> count (bad records are counted, not dropped)
    samples_late: int
    runs: tuple[PolicyRun, ...]
    # Windows with no sample at all (a gap in the recording): their ends, for the report.
    gaps_ms: tuple[tuple[int, int], ...] = ()
