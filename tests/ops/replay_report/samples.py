"""Hand-made replay results for the report's tests: a small one whose figures are worked out
by hand, and a generated day (1440 windows, tens of brokers) for the page's scaling."""

from __future__ import annotations

import math

from balancer.core.replay.result import (
    POLICY_OURS,
    POLICY_PULSAR_THRESHOLD,
    ActionKind,
    PolicyRun,
    ReplayAction,
    ReplayResult,
    WindowSample,
)

HOUR_MS = 3_600_000
T0 = 490_000 * HOUR_MS  # 2025-11-24 16:00Z, an hour's start
MIN = 60_000
HOT = "tenant/ns/0x00000000_0x40000000"


def _windows(loads: list[dict[str, float]], hot_from: int, hot_to: int) -> tuple[WindowSample, ...]:
    return tuple(
        WindowSample(
            window_end_ms=T0 + (i + 1) * MIN,
            broker_load={f"east/{b}": v for b, v in load.items()},
            bundles_over={f"east/{HOT}": 1.5} if hot_from <= i <= hot_to else {},
            bundles=4 if i < 3 else 5,
        )
        for i, load in enumerate(loads)
    )


def small_result() -> ReplayResult:
    """Two policies, six windows of 60 s (ends T0+1..T0+6 min), brokers b1 and b2 of east.

    ours: b1 over at windows 1-2 (ends T0+2, T0+3 min); the hot bundle over at 1-2; it
    splits the bundle at T0+3 min (60 s after both started) and moves one child off b1 at
    T0+4 min. Broker-minutes 2, bundle-minutes 2.
    pulsar: b1 over at windows 1-4 (4 broker-minutes), the bundle over at 1-4 (4 bundle
    minutes); it moves the hot bundle off b1 at T0+5 min (180 s after both started) and
    offloads a topic. Nothing of it in another hour.
    """
    ours = PolicyRun(
        policy=POLICY_OURS,
        description="ours (defaults)",
        actions=(
            ReplayAction(
                at_ms=T0 + 3 * MIN,
                cluster="east",
                kind=ActionKind.SPLIT,
                subject=HOT,
                children=("0x00000000_0x20000000", "0x20000000_0x40000000"),
                reason="msg rate 150 % of its limit",
            ),
            ReplayAction(
                at_ms=T0 + 4 * MIN,
                cluster="east",
                kind=ActionKind.MOVE,
                subject="tenant/ns/0x20000000_0x40000000",
                source_broker="b1",
                destination_broker="b2",
                sessions_moved=40,
                reason="overloaded",
            ),
        ),
        windows=_windows(
            [{"b1": 0.5, "b2": 0.3}, {"b1": 0.9, "b2": 0.3}, {"b1": 0.88, "b2": 0.3}]
            + [{"b1": 0.6, "b2": 0.5}] * 3,
            1,
            2,
        ),
    )
    pulsar = PolicyRun(
        policy=POLICY_PULSAR_THRESHOLD,
        description="ThresholdShedder + range_equally_divide (defaults)",
        actions=(
            ReplayAction(
                at_ms=T0 + 5 * MIN,
                cluster="east",
                kind=ActionKind.MOVE,
                subject=HOT,
                source_broker="b1",
                destination_broker="b2",
                sessions_moved=120,
                reason="ThresholdShedder: b1 above average + 10 %",
            ),
            ReplayAction(
                at_ms=T0 + 5 * MIN,
                cluster="east",
                kind=ActionKind.OFFLOAD,
                subject="persistent://tenant/ns/big",
                reason="storage 12 GiB over 10 GiB",
            ),
        ),
        windows=_windows(
            [{"b1": 0.5, "b2": 0.3}] + [{"b1": 0.95, "b2": 0.3}] * 4 + [{"b1": 0.5, "b2": 0.6}],
            1,
            4,
        ),
    )
    return ReplayResult(
        source="/recordings/east-2025-11-25",
        start_ms=T0 + MIN,
        end_ms=T0 + 6 * MIN,
        window_s=60,
        clusters=("east",),
        topics=1200,
        samples=7200,
        samples_rejected={"bad_json": 3},
        samples_late=2,
        runs=(ours, pulsar),
        gaps_ms=(),
    )


def day_result(
    brokers: int = 30, windows: int = 1440, actions_per_policy: int = 50
) -> ReplayResult:
    """A generated day: brokers' loads follow a daily wave with one hot broker per policy in
    the afternoon; `actions_per_policy` actions of each kind in turn, spread over the day."""
    runs = []
    for p, policy in enumerate((POLICY_OURS, POLICY_PULSAR_THRESHOLD)):
        samples = []
        for i in range(windows):
            wave = 0.45 + 0.3 * math.sin(2 * math.pi * i / windows)
            load = {
                f"east/broker-{b:02d}": round(wave + 0.01 * ((b * 7 + i) % 11), 4)
                for b in range(brokers)
            }
            if 800 <= i < 900 + 100 * p:
                load["east/broker-00"] = 1.1
            samples.append(
                WindowSample(
                    window_end_ms=T0 + (i + 1) * MIN,
                    broker_load=load,
                    bundles_over={f"east/{HOT}": 1.2} if 820 <= i < 840 else {},
                    bundles=64,
                )
            )
        kinds = (ActionKind.SPLIT, ActionKind.MOVE, ActionKind.OFFLOAD)
        acts = tuple(
            ReplayAction(
                at_ms=T0 + (k * windows // actions_per_policy + 1) * MIN,
                cluster="east",
                kind=kinds[k % 3],
                subject=HOT if kinds[k % 3] != ActionKind.OFFLOAD else "persistent://tenant/ns/t",
                source_broker="broker-00" if kinds[k % 3] == ActionKind.MOVE else None,
                destination_broker="broker-01" if kinds[k % 3] == ActionKind.MOVE else None,
                sessions_moved=10 if kinds[k % 3] == ActionKind.MOVE else 0,
            )
            for k in range(actions_per_policy)
        )
        runs.append(
            PolicyRun(policy=policy, description=policy, actions=acts, windows=tuple(samples))
        )
    return ReplayResult(
        source="generated-day",
        start_ms=T0 + MIN,
        end_ms=T0 + windows * MIN,
        window_s=60,
        clusters=("east",),
        topics=100_000,
        samples=144_000_000,
        samples_rejected={},
        samples_late=0,
        runs=tuple(runs),
        gaps_ms=((T0 + 300 * MIN, T0 + 310 * MIN),),
    )
