"""One rule for every replayed policy: a broker's recorded load report corrected for the load
it lost or gained because the policy's layout gives some bundles (or topics) another owner
than the recording did. Pulsar's policies read it through `ReplayLayout.broker_loads`,
`ours`' move planner through `balancer.app.replay.ours.corrected_report`.

Each resource is corrected by what drives it: bandwidth in/out by the throughput in/out moved
(Kbit/s, as `LinuxBrokerHostUsageImpl` samples the NIC), cpu by the msg rate moved, at the
cpu cost per msg/s measured on the broker that carried the load in the recording (its cpu
usage over its msg rate in + out; the cluster's average when it carried none). Memory and
direct memory are left as recorded; no usage goes below zero.

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from math import fsum
from typing import Protocol

from balancer.core.broker_load import BrokerLoadReport, Resource, ResourceUsage

# LinuxBrokerHostUsageImpl reports bandwidth in Kbit/s: bytes/s x 8 / 1000.
KBIT_PER_BYTE = 8.0 / 1000.0


class MovedLoad(Protocol):
    """A topic's or a bundle's rates (`TopicLoad`, `BundleLoad`)."""

    @property
    def msg_rate_in(self) -> float: ...

    @property
    def msg_rate_out(self) -> float: ...

    @property
    def msg_throughput_in(self) -> float: ...  # bytes/s

    @property
    def msg_throughput_out(self) -> float: ...  # bytes/s


@dataclass
class LoadDelta:
    """What a broker gained (positive) or lost (negative) against its recorded report."""

    cpu_pct: float = 0.0  # percent of a core
    msg_rate: float = 0.0  # msg/s in + out (summed as loads' in + out, not in and out apart)
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0  # bytes/s
    throughput_out: float = 0.0  # bytes/s

    def is_zero(self) -> bool:
        return self == _ZERO


_ZERO = LoadDelta()


def newest_reports(reports: Iterable[BrokerLoadReport]) -> dict[str, BrokerLoadReport]:
    """Per broker, its newest report (the later one when a round holds two)."""
    newest: dict[str, BrokerLoadReport] = {}
    for r in reports:
        if r.broker not in newest or r.timestamp_ms > newest[r.broker].timestamp_ms:
            newest[r.broker] = r
    return newest


def cpu_costs(reports: Mapping[str, BrokerLoadReport]) -> dict[str, float]:
    """Per broker, cpu usage (percent of a core) per msg/s in + out it carried; under "" the
    cluster's average, for a broker with no report or no traffic."""
    costs: dict[str, float] = {}
    total_cpu: list[float] = []
    total_rate: list[float] = []
    for broker, r in reports.items():
        cpu = r.resources.get(Resource.CPU)
        rate = r.msg_rate_in + r.msg_rate_out
        if cpu is not None and rate > 0:
            costs[broker] = cpu.usage / rate
            total_cpu.append(cpu.usage)
            total_rate.append(rate)
    costs[""] = fsum(total_cpu) / fsum(total_rate) if total_rate else 0.0
    return costs


def move_load(
    deltas: dict[str, LoadDelta],
    load: MovedLoad,
    source: str | None,
    destination: str | None,
    cpu_cost: Mapping[str, float],
) -> None:
    """Take a topic's (or a whole bundle's) load off `source` (its recorded owner) and onto
    `destination`, its cpu at `source`'s cost (None: unknown, the cluster's average)."""
    rate = load.msg_rate_in + load.msg_rate_out
    cpu = rate * cpu_cost.get(source or "", cpu_cost.get("", 0.0))
    for broker, sign in ((source, -1.0), (destination, 1.0)):
        if broker is None:
            continue
        d = deltas.get(broker)
        if d is None:
            d = deltas[broker] = LoadDelta()
        d.cpu_pct += sign * cpu
        d.msg_rate += sign * rate
        d.msg_rate_in += sign * load.msg_rate_in
        d.msg_rate_out += sign * load.msg_rate_out
        d.throughput_in += sign * load.msg_throughput_in
        d.throughput_out += sign * load.msg_throughput_out


def corrected_resources(
    resources: Mapping[Resource, ResourceUsage], delta: LoadDelta
) -> dict[Resource, ResourceUsage]:
    """The report's resource usages with `delta` applied (a resource not reported stays so)."""
    out = dict(resources)
    if delta.is_zero():
        return out
    _shift(out, Resource.CPU, delta.cpu_pct)
    _shift(out, Resource.BANDWIDTH_IN, delta.throughput_in * KBIT_PER_BYTE)
    _shift(out, Resource.BANDWIDTH_OUT, delta.throughput_out * KBIT_PER_BYTE)
    return out


def corrected_report(
    report: BrokerLoadReport, delta: LoadDelta, owned: Iterable[str]
) -> BrokerLoadReport:
    """The report as the broker would give it owning `owned` and carrying `delta` more."""
    bundles = tuple(sorted(owned))
    return replace(
        report, bundles=bundles, num_bundles=len(bundles),
        resources=corrected_resources(report.resources, delta),
        msg_rate_in=max(0.0, report.msg_rate_in + delta.msg_rate_in),
        msg_rate_out=max(0.0, report.msg_rate_out + delta.msg_rate_out),
        msg_throughput_in=max(0.0, report.msg_throughput_in + delta.throughput_in),
        msg_throughput_out=max(0.0, report.msg_throughput_out + delta.throughput_out),
    )  # fmt: skip


def _shift(resources: dict[Resource, ResourceUsage], resource: Resource, by: float) -> None:
    usage = resources.get(resource)
    if usage is not None and by != 0.0:
        resources[resource] = ResourceUsage(max(0.0, usage.usage + by), usage.limit)
