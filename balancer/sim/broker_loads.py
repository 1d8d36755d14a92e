"""What a simulated broker says of its own load, with Pulsar's lags (issue 41):

- cpu and bandwidth are sampled once a minute, each sample the average over the minute
  before it (`LinuxBrokerHostUsageImpl.calculateBrokerHostUsage`, scheduled every
  `loadBalancerHostUsageCheckIntervalMinutes` = 1: cpu and NIC counters are deltas between
  two collections). A report shows the newest sample, so the first report after a move
  still shows the old load;
- a modular broker's `lastUpdate` is when it last WROTE its report to the metadata store
  (`ModularLoadManagerImpl.writeBrokerDataOnZooKeeper` / `needBrokerDataUpdate`: a change
  over `loadBalancerReportUpdateThresholdPercentage` 10 %, or
  `loadBalancerReportUpdateMaxIntervalMinutes` 15 since the last write), not when the
  usages were sampled;
- an extensible broker answers `GET /admin/v2/broker-stats/metrics` with its load as
  `BrokerLoadData.toMetrics` spells it (`ExtensibleLoadManagerImpl.getMetrics`).

The simulator has no clock of its own between requests: a sample is made of what the
requests saw of the broker in the minute before it (each request observes its usage now),
and the store write is decided when a report is asked for (Pulsar checks every 5 s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

USAGE_INTERVAL_MS = 60_000  # loadBalancerHostUsageCheckIntervalMinutes = 1
REPORT_UPDATE_THRESHOLD_PCT = 10.0  # loadBalancerReportUpdateThresholdPercentage
REPORT_UPDATE_MAX_INTERVAL_MS = 15 * 60_000  # loadBalancerReportUpdateMaxIntervalMinutes
# ServiceConfiguration.loadBalancerHistoryResourcePercentage: BrokerLoadData's EMA history.
HISTORY_RESOURCE_PCT = 0.9

HOST_USAGE_KEYS = ("cpu", "bandwidthIn", "bandwidthOut")  # the sampled ones


@dataclass
class _Sampler:
    tick_ms: int  # the newest sample's time
    shown: dict[str, float]  # the newest sample: resource -> usage
    seen: list[tuple[int, dict[str, float]]] = field(default_factory=list)


@dataclass
class _Written:
    """What the broker last wrote to the metadata store (ModularLoadManagerImpl.lastData)."""

    at_ms: int
    max_usage_pct: float
    msg_rate: float
    throughput: float
    bundles: int


@dataclass
class _Ema:
    value: float


def _percent_change(old: float, new: float) -> float:
    # ModularLoadManagerImpl.percentChange: 0 -> anything is a full change.
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return 100 * abs((new - old) / old)


class BrokerLoadLag:
    """Per broker: its once-a-minute usage samples, its last store write and its EMA."""

    def __init__(self) -> None:
        self._samplers: dict[tuple[str, int], _Sampler] = {}
        self._written: dict[tuple[str, int], _Written] = {}
        self._ema: dict[tuple[str, int], _Ema] = {}

    def sampled(
        self, key: tuple[str, int], now_ms: int, usage: dict[str, float]
    ) -> dict[str, float]:
        """The newest sample's usages, `usage` being what the broker uses now. A broker's
        first sample is what it uses when first asked (its start)."""
        tick = now_ms - now_ms % USAGE_INTERVAL_MS
        state = self._samplers.get(key)
        if state is None:
            state = self._samplers[key] = _Sampler(tick, dict(usage))
        elif tick > state.tick_ms:
            # The sample at `tick` averages the minute before it: what was seen in it, else
            # the last thing seen before it (nothing changed that anyone saw).
            inside = [u for at, u in state.seen if tick - USAGE_INTERVAL_MS <= at < tick]
            before = [u for at, u in state.seen if at < tick]
            if inside:
                state.shown = {k: sum(u[k] for u in inside) / len(inside) for k in usage}
            elif before:
                state.shown = dict(before[-1])
            state.tick_ms = tick
            state.seen = [(at, u) for at, u in state.seen if at >= tick - USAGE_INTERVAL_MS]
        state.seen.append((now_ms, dict(usage)))
        return dict(state.shown)

    def last_update(self, key: tuple[str, int], now_ms: int, report: dict[str, Any]) -> int:
        """`lastUpdate` of a modular broker's report: moved to `now_ms` only when
        needBrokerDataUpdate says the report is written again."""
        max_pct = max(
            100.0 * report[k]["usage"] / report[k]["limit"] if report[k]["limit"] > 0 else 0.0
            for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
        )
        now = _Written(
            now_ms,
            max_pct,
            report["msgRateIn"] + report["msgRateOut"],
            report["msgThroughputIn"] + report["msgThroughputOut"],
            report["numBundles"],
        )
        last = self._written.get(key)
        if last is None or now_ms - last.at_ms > REPORT_UPDATE_MAX_INTERVAL_MS:
            self._written[key] = now
            return now_ms
        change = max(
            abs(last.max_usage_pct - now.max_usage_pct),
            _percent_change(last.msg_rate, now.msg_rate),
            _percent_change(last.throughput, now.throughput),
            _percent_change(last.bundles, now.bundles),
        )
        if change > REPORT_UPDATE_THRESHOLD_PCT:
            self._written[key] = now
            return now_ms
        return last.at_ms

    def forget(self, key: tuple[str, int]) -> None:
        """A restarted broker's JVM starts afresh: no samples, no store write, no EMA."""
        self._samplers.pop(key, None)
        self._written.pop(key, None)
        self._ema.pop(key, None)

    def weighted_max_ema(self, key: tuple[str, int], weighted_max: float) -> float:
        """BrokerLoadData.updateWeightedMaxEMA, once per sample shown."""
        ema = self._ema.get(key)
        if ema is None:
            self._ema[key] = _Ema(weighted_max)
            return weighted_max
        ema.value = ema.value * HISTORY_RESOURCE_PCT + (1 - HISTORY_RESOURCE_PCT) * weighted_max
        return ema.value


def percent(usage: dict[str, float]) -> float:
    """ResourceUsage.percentUsage: usage / limit x 100 (0 for a limit <= 0)."""
    return 100.0 * usage["usage"] / usage["limit"] if usage["limit"] > 0 else 0.0


def load_balancing_metrics(
    host: str, report: dict[str, Any], weighted_max_ema: float | None
) -> list[dict[str, Any]]:
    """BrokerLoadData.toMetrics(advertisedAddress): the `loadBalancing` entries of
    `GET /admin/v2/broker-stats/metrics` (each a `Metrics` {metrics, dimensions}); the
    `broker` dimension is the advertised address alone (no port). Without
    `weighted_max_ema` (the modular load manager) the usages alone."""
    dims = {"metric": "loadBalancing", "broker": host}
    pct = {
        k: percent(report[k])
        for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
    }
    # BrokerLoadData.updateMaxResourceUsage: no memory, no weights.
    max_usage = max(pct["cpu"], pct["directMemory"], pct["bandwidthIn"], pct["bandwidthOut"]) / 100
    usages = {
        "metrics": {
            "brk_lb_cpu_usage": pct["cpu"],
            "brk_lb_memory_usage": pct["memory"],
            "brk_lb_directMemory_usage": pct["directMemory"],
            "brk_lb_bandwidth_in_usage": pct["bandwidthIn"],
            "brk_lb_bandwidth_out_usage": pct["bandwidthOut"],
        },
        "dimensions": dict(dims),
    }
    if weighted_max_ema is None:
        return [usages]
    return [
        usages,
        {
            "metrics": {"brk_lb_resource_usage": weighted_max_ema},
            "dimensions": {**dims, "feature": "max_ema"},
        },
        {"metrics": {"brk_lb_resource_usage": max_usage}, "dimensions": {**dims, "feature": "max"}},
        # AssignCounter.toMetrics: beside the load, as Pulsar lists it.
        {
            "metrics": {"brk_lb_assign_broker_breakdown_total": 0},
            "dimensions": {"metric": "assign", "broker": host, "result": "Success"},
        },
    ]
