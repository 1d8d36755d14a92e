"""The traffic model: every topic's rates, sessions and bytes written as a function of
simulated time, vectorised over all topics with numpy (a scenario may hold 100k topics).

Deterministic given the scenario's seed: the same scenario and seed give the same numbers
at the same simulated time, whatever was asked before. No clock, no I/O.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from balancer.core.hashing import hash_position
from balancer.core.topics import PARTITION_SUFFIX
from balancer.sim.scenarios import NamespaceSpec, RampChange, Scenario, StepChange

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class TopicTable:
    """Static description of every topic of the scenario, index-aligned arrays."""

    full_names: tuple[str, ...]
    local_names: tuple[str, ...]
    namespace_index: IntArray
    positions: IntArray
    base_rate_in: FloatArray  # msg/s before time shapes
    msg_size_bytes: FloatArray
    producers: IntArray
    subscriptions: IntArray
    consumers_per_subscription: IntArray
    initial_storage_bytes: FloatArray
    backlog_s: FloatArray
    # Partitioned topics per namespace index: base local name -> number of partitions.
    partitioned: tuple[dict[str, int], ...]

    @property
    def size(self) -> int:
        return len(self.full_names)


@dataclass(frozen=True)
class Rates:
    """Per-topic rates at one simulated instant (index-aligned with the topic table)."""

    msg_rate_in: FloatArray
    msg_rate_out: FloatArray
    throughput_in: FloatArray  # bytes/s
    throughput_out: FloatArray  # bytes/s


@dataclass(frozen=True)
class _CompiledChange:
    topic_indices: IntArray
    change: StepChange | RampChange

    def factor(self, elapsed_s: float) -> float:
        c = self.change
        if isinstance(c, StepChange):
            return c.factor if elapsed_s >= c.at_s else 1.0
        if elapsed_s <= c.from_s:
            return 1.0
        if elapsed_s >= c.to_s:
            return c.factor
        done = (elapsed_s - c.from_s) / (c.to_s - c.from_s)
        return 1.0 + (c.factor - 1.0) * done


def _zipf_shares(count: int, exponent: float, rng: np.random.Generator) -> FloatArray:
    """Shares summing to 1, Zipf-distributed over a seeded random ranking of the topics."""
    ranks = rng.permutation(count).astype(np.float64) + 1.0
    weights = ranks ** (-exponent) if exponent > 0 else np.ones(count)
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def build_topic_table(scenario: Scenario) -> TopicTable:
    full: list[str] = []
    local: list[str] = []
    ns_idx: list[int] = []
    rate: list[float] = []
    size: list[float] = []
    producers: list[int] = []
    subs: list[int] = []
    cps: list[int] = []
    storage: list[float] = []
    backlog: list[float] = []
    partitioned: list[dict[str, int]] = []
    for n, ns in enumerate(scenario.namespaces):
        index_of: dict[str, int] = {}
        parts: dict[str, int] = {}
        for g, group in enumerate(ns.topic_groups):
            rng = np.random.default_rng([scenario.seed, n, g])
            shares = _zipf_shares(group.count, group.zipf_exponent, rng)
            per_partition = max(group.partitions, 1)
            for i in range(group.count):
                base = group.name if group.count == 1 else f"{group.name}-{i}"
                names = (
                    [f"{base}{PARTITION_SUFFIX}{p}" for p in range(group.partitions)]
                    if group.partitions
                    else [base]
                )
                if group.partitions:
                    parts[base] = group.partitions
                topic_rate = group.total_msg_rate_in * float(shares[i]) / per_partition
                for name in names:
                    if name in index_of:
                        raise ValueError(f"namespace {ns.name}: topic {name!r} defined twice")
                    index_of[name] = len(full)
                    full.append(f"persistent://{ns.name}/{name}")
                    local.append(name)
                    ns_idx.append(n)
                    rate.append(topic_rate)
                    size.append(group.avg_msg_size_bytes)
                    producers.append(group.producers_per_topic)
                    subs.append(group.subscriptions)
                    cps.append(group.consumers_per_subscription)
                    storage.append(float(group.initial_storage_bytes))
                    backlog.append(group.backlog_s)
        for o in ns.outstanding:
            found = index_of.get(o.topic)
            if found is None:
                i = index_of[o.topic] = len(full)
                full.append(f"persistent://{ns.name}/{o.topic}")
                local.append(o.topic)
                ns_idx.append(n)
                rate.append(0.0)
                size.append(1024.0)
                producers.append(1)
                subs.append(1)
                cps.append(1)
                storage.append(0.0)
                backlog.append(0.0)
            else:
                i = found
            rate[i] = o.msg_rate_in
            if o.avg_msg_size_bytes is not None:
                size[i] = o.avg_msg_size_bytes
            if o.producers is not None:
                producers[i] = o.producers
            if o.subscriptions is not None:
                subs[i] = o.subscriptions
            if o.consumers_per_subscription is not None:
                cps[i] = o.consumers_per_subscription
            if o.initial_storage_bytes is not None:
                storage[i] = float(o.initial_storage_bytes)
            if o.backlog_s is not None:
                backlog[i] = o.backlog_s
        partitioned.append(parts)
    return TopicTable(
        full_names=tuple(full),
        local_names=tuple(local),
        namespace_index=np.asarray(ns_idx, dtype=np.int64),
        positions=np.fromiter((hash_position(x) for x in full), dtype=np.int64, count=len(full)),
        base_rate_in=np.asarray(rate, dtype=np.float64),
        msg_size_bytes=np.asarray(size, dtype=np.float64),
        producers=np.asarray(producers, dtype=np.int64),
        subscriptions=np.asarray(subs, dtype=np.int64),
        consumers_per_subscription=np.asarray(cps, dtype=np.int64),
        initial_storage_bytes=np.asarray(storage, dtype=np.float64),
        backlog_s=np.asarray(backlog, dtype=np.float64),
        partitioned=tuple(partitioned),
    )


def _compile_changes(scenario: Scenario, table: TopicTable) -> list[_CompiledChange]:
    compiled = []
    local = np.asarray(table.local_names, dtype=object)
    for n, ns in enumerate(scenario.namespaces):
        in_ns = np.flatnonzero(table.namespace_index == n)
        for change in ns.changes:
            if change.topics:
                names = local[in_ns]
                keep = np.zeros(len(in_ns), dtype=bool)
                for pattern in change.topics:
                    keep |= np.fromiter(
                        (fnmatch.fnmatchcase(str(x), pattern) for x in names),
                        dtype=bool,
                        count=len(names),
                    )
                chosen = in_ns[keep]
            else:
                chosen = in_ns
            compiled.append(_CompiledChange(chosen.astype(np.int64), change))
    return compiled


def _daily_factor(ns: NamespaceSpec, start_hour_utc: float, elapsed_s: float) -> float:
    if ns.daily_cycle is None:
        return 1.0
    hour = (start_hour_utc + elapsed_s / 3600.0) % 24.0
    angle = 2.0 * math.pi * (hour - ns.daily_cycle.peak_hour_utc) / 24.0
    return 1.0 + ns.daily_cycle.amplitude * math.cos(angle)


class TrafficModel:
    """Rates and cumulative bytes written per topic, as functions of simulated seconds."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.table = build_topic_table(scenario)
        self._changes = _compile_changes(scenario, self.table)
        start = scenario.start_ms / 1000.0
        self._start_hour_utc = (start % _SECONDS_PER_DAY) / 3600.0
        self._step_s = scenario.broker.integration_step_s
        # Cumulative bytes written over the first `_cum_cells` whole integration cells.
        self._cum_cells = 0
        self._cum_bytes = np.zeros(self.table.size, dtype=np.float64)
        self._rates_cache: tuple[float, Rates] | None = None

    def multiplier(self, elapsed_s: float) -> FloatArray:
        """Time shape of every topic's rate: daily cycle x step/ramp changes x noise."""
        t = max(elapsed_s, 0.0)
        daily = np.asarray(
            [_daily_factor(ns, self._start_hour_utc, t) for ns in self.scenario.namespaces]
            or [1.0],
            dtype=np.float64,
        )
        mult = daily[self.table.namespace_index] if self.table.size else np.ones(0)
        mult = np.array(mult, dtype=np.float64)
        for change in self._changes:
            f = change.factor(t)
            if f != 1.0:
                mult[change.topic_indices] *= f
        noise_pct = self.scenario.noise_pct
        if noise_pct > 0 and self.table.size:
            bucket = int(t // self.scenario.noise_interval_s)
            rng = np.random.default_rng([self.scenario.seed, 7919, bucket])
            noise = 1.0 + (noise_pct / 100.0) * rng.standard_normal(self.table.size)
            mult *= np.clip(noise, 0.0, None)
        return mult

    def rates(self, elapsed_s: float) -> Rates:
        cached = self._rates_cache
        if cached is not None and cached[0] == elapsed_s:
            return cached[1]
        t = self.table
        rate_in = t.base_rate_in * self.multiplier(elapsed_s)
        fanout = (t.subscriptions * np.minimum(t.consumers_per_subscription, 1)).astype(np.float64)
        rate_out = rate_in * fanout
        rates = Rates(
            msg_rate_in=rate_in,
            msg_rate_out=rate_out,
            throughput_in=rate_in * t.msg_size_bytes,
            throughput_out=rate_out * t.msg_size_bytes,
        )
        self._rates_cache = (elapsed_s, rates)
        return rates

    def bytes_written(self, elapsed_s: float) -> FloatArray:
        """Total bytes ever written per topic: initial storage + integral of throughput-in.

        Integrated with the midpoint rule over a fixed grid, so the result depends only on
        `elapsed_s`, not on which instants were asked for before.
        """
        t = max(elapsed_s, 0.0)
        step = self._step_s
        cells = int(t // step)
        if cells < self._cum_cells:  # asked about the past: start over
            self._cum_cells = 0
            self._cum_bytes = np.zeros(self.table.size, dtype=np.float64)
        while self._cum_cells < cells:
            mid = (self._cum_cells + 0.5) * step
            self._cum_bytes = self._cum_bytes + self._throughput_in_at(mid) * step
            self._cum_cells += 1
        partial = t - cells * step
        total = self.table.initial_storage_bytes + self._cum_bytes
        if partial > 0:
            total = total + self._throughput_in_at(cells * step + partial / 2) * partial
        return np.asarray(total, dtype=np.float64)

    def _throughput_in_at(self, elapsed_s: float) -> FloatArray:
        t = self.table
        return np.asarray(
            t.base_rate_in * self.multiplier(elapsed_s) * t.msg_size_bytes, dtype=np.float64
        )
