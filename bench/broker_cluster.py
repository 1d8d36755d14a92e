"""The simulated-time cluster of `bench.broker_balance`: brokers with a capacity (NIC limits
and a cpu model), bundles with load and sessions, who owns what, and the scenarios.

A broker's load is Pulsar's `LocalBrokerData.getMaxResourceUsageWithWeight` with the default
weights (cpu, bandwidth in, bandwidth out 1.0; memory 0): the largest of

- cpu: (msg/s in+out / msgs_per_core + bytes/s in+out / bytes_per_core) / cores,
- bandwidth in: bytes/s in / NIC limit, bandwidth out: bytes/s out / NIC limit.

Loads are constant between decision cycles (moves happen on the minute), so one sample per
minute is exact. No clock, no sleeping, no I/O beyond reading a scenario file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from balancer.core.broker_load import BrokerCapacity
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.moves.model import IsolationPolicy
from balancer.sim.ownership import initial_owner
from balancer.sim.scenarios import load_scenario
from bench.common import ScenarioLoads, last_change_s, topics_by_bundle

MB = 1024.0 * 1024.0
GBIT_BYTES = 125_000_000.0  # 1 Gbit/s NIC in bytes/s, per direction


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    broker: str  # id `host:port`
    cores: int = 8
    nic_bytes: float = GBIT_BYTES  # bandwidth limit per direction, bytes/s
    msgs_per_core: float = 25_000.0  # msg/s (in + out) one core carries
    bytes_per_core: float = 200.0 * MB  # bytes/s (in + out) one core carries

    @property
    def host(self) -> str:
        return self.broker.rsplit(":", 1)[0]

    def cpu_ratio(self, msg_rate: float, throughput_bytes: float) -> float:
        return (msg_rate / self.msgs_per_core + throughput_bytes / self.bytes_per_core) / self.cores

    def load_ratio(self, rates: Rates) -> float:
        return max(
            self.cpu_ratio(rates.msg_rate, rates.throughput_bytes),
            rates.throughput_in / self.nic_bytes,
            rates.throughput_out / self.nic_bytes,
        )

    @property
    def capacity(self) -> BrokerCapacity:
        """What one msg/s or byte/s costs in load ratio, for the move decision: cpu-bound for
        msg rate, NIC-bound for throughput (in + out; our bundles are in ~= out)."""
        return BrokerCapacity(
            max_msg_rate=self.cores * self.msgs_per_core,
            max_throughput_bytes=2.0 * self.nic_bytes,
        )


@dataclass(frozen=True, slots=True)
class Rates:
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0  # bytes/s
    throughput_out: float = 0.0

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput_bytes(self) -> float:
        return self.throughput_in + self.throughput_out

    def __add__(self, other: Rates) -> Rates:
        return Rates(
            self.msg_rate_in + other.msg_rate_in,
            self.msg_rate_out + other.msg_rate_out,
            self.throughput_in + other.throughput_in,
            self.throughput_out + other.throughput_out,
        )


@dataclass(frozen=True, slots=True)
class BundleSpec:
    namespace: str
    bundle: BundleRange
    owner: str  # the broker that owns it at t = 0
    rates: Rates
    sessions: int  # producers + consumers
    topics: int

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.bundle}"


@dataclass(frozen=True)
class ClusterScenario:
    name: str
    description: str
    brokers: tuple[BrokerSpec, ...]
    bundles: tuple[BundleSpec, ...]
    isolation: tuple[IsolationPolicy, ...] = ()
    built_in: bool = True  # defined in this module (False: derived from conf/scenarios)


@dataclass
class ClusterState:
    """Who owns what now; loads follow from the bundles' rates."""

    scenario: ClusterScenario
    owners: dict[str, str] = field(default_factory=dict)  # bundle name -> broker

    @classmethod
    def start(cls, scenario: ClusterScenario) -> ClusterState:
        return cls(scenario, {b.name: b.owner for b in scenario.bundles})

    @property
    def brokers(self) -> tuple[BrokerSpec, ...]:
        return self.scenario.brokers

    # The shedders' `ClusterView` (balancer.core.replay.pulsar_shedders).
    def broker_ids(self) -> list[str]:
        return [b.broker for b in self.brokers]

    def all_bundles(self) -> tuple[BundleSpec, ...]:
        return self.scenario.bundles

    def owner_of(self, bundle: str) -> str | None:
        return self.owners[bundle]

    def bundles_of(self, broker: str) -> list[BundleSpec]:
        return [b for b in self.scenario.bundles if self.owners[b.name] == broker]

    def broker_rates(self) -> dict[str, Rates]:
        out = {b.broker: Rates() for b in self.brokers}
        for bundle in self.scenario.bundles:
            owner = self.owners[bundle.name]
            if owner in out:  # else on a broker that is stopping (bench.broker_rollout)
                out[owner] = out[owner] + bundle.rates
        return out

    def loads(self) -> dict[str, float]:
        rates = self.broker_rates()
        return {b.broker: b.load_ratio(rates[b.broker]) for b in self.brokers}

    def bundle_load_on(self, bundle: BundleSpec, broker: str) -> float:
        spec = next(b for b in self.brokers if b.broker == broker)
        return spec.load_ratio(bundle.rates)

    def allowed_brokers(self, namespace: str) -> set[str]:
        """Pulsar's `LoadManagerShared.applyNamespacePolicies`: a namespace under a policy
        goes to its primary brokers (secondary when too few primaries); a namespace under
        none goes only to brokers that no policy names."""
        hosts = {b.broker: b.host for b in self.brokers}
        named: set[str] = set()
        for policy in self.scenario.isolation:
            for broker, host in hosts.items():
                if any(re.fullmatch(p, host) for p in (*policy.primary, *policy.secondary)):
                    named.add(broker)
        for policy in self.scenario.isolation:
            if any(re.fullmatch(p, namespace) for p in policy.namespaces):
                primary = {
                    b for b, h in hosts.items() if any(re.fullmatch(p, h) for p in policy.primary)
                }
                if len(primary) >= policy.min_primary_brokers:
                    return primary
                return primary | {
                    b for b, h in hosts.items() if any(re.fullmatch(p, h) for p in policy.secondary)
                }
        return set(hosts) - named

    def has_policy(self, namespace: str) -> bool:
        return any(
            re.fullmatch(p, namespace) for pol in self.scenario.isolation for p in pol.namespaces
        )


# ---- built-in scenarios (the five of issue 35 item 4, plus an already balanced cluster) ----

MSG_SIZE_BYTES = 2048.0


def _broker_ids(n: int, start: int = 1) -> list[str]:
    return [f"broker-{i}:8080" for i in range(start, start + n)]


def _namespace_bundles(
    namespace: str,
    owners: Sequence[str],
    *,
    msg_rate_in: float,
    rng: np.random.Generator,
    jitter: float = 0.3,
    topics_per_bundle: int = 20,
) -> list[BundleSpec]:
    """len(owners) bundles of one namespace, bundle i on owners[i], each with about
    `msg_rate_in` msg/s in (one subscription: out = in), 2 KiB messages, +-jitter."""
    layout = NamespaceBundles.initial(namespace, len(owners))
    out = []
    for bundle, owner in zip(layout.bundles, owners, strict=True):
        rate = msg_rate_in * float(rng.uniform(1 - jitter, 1 + jitter))
        tp = rate * MSG_SIZE_BYTES
        out.append(
            BundleSpec(
                namespace=namespace,
                bundle=bundle,
                owner=owner,
                rates=Rates(rate, rate, tp, tp),
                sessions=2 * topics_per_bundle,
                topics=topics_per_bundle,
            )
        )
    return out


def _spread(brokers: Sequence[str], count: int) -> list[str]:
    return [brokers[i % len(brokers)] for i in range(count)]


def _namespaces(
    owners: Sequence[Sequence[str]],
    *,
    msg_rate_in: float,
    rng: np.random.Generator,
    jitter: float = 0.3,
) -> list[BundleSpec]:
    """Namespaces t/ns0, t/ns1, ...: namespace n has a bundle on each broker of owners[n]
    (`_namespace_bundles`)."""
    return [
        b
        for n, on in enumerate(owners)
        for b in _namespace_bundles(f"t/ns{n}", on, msg_rate_in=msg_rate_in, rng=rng, jitter=jitter)
    ]


def _cluster(
    name: str,
    description: str,
    brokers: Sequence[str] | Sequence[BrokerSpec],
    bundles: Sequence[BundleSpec],
    isolation: tuple[IsolationPolicy, ...] = (),
) -> ClusterScenario:
    """A scenario; broker ids stand for default `BrokerSpec`s."""
    specs = tuple(b if isinstance(b, BrokerSpec) else BrokerSpec(b) for b in brokers)
    return ClusterScenario(name, description, specs, tuple(bundles), isolation)


def built_in_scenarios() -> list[ClusterScenario]:
    # One generator drawn in this order: a scenario's loads depend on those built before it.
    rng = np.random.default_rng(35)
    scenarios = []

    # Already balanced: 4 brokers, 4 namespaces x 40 bundles spread round-robin (~0.55 each).
    ids = _broker_ids(4)
    bundles = _namespaces([_spread(ids, 40)] * 4, msg_rate_in=840, rng=rng, jitter=0)
    scenarios.append(
        _cluster("balanced", "4 brokers already balanced: no move expected", ids, bundles)
    )

    # A broker restart: 5 brokers, broker-5 came back and owns nothing; its bundles went to
    # the other four (40 bundles, ~0.6 each; mean 0.48).
    ids = _broker_ids(5)
    bundles = _namespaces([_spread(ids[:4], 40)] * 4, msg_rate_in=915, rng=rng)
    scenarios.append(
        _cluster("broker-restart", "5 brokers, one restarted and owning nothing", ids, bundles)
    )

    # 5 -> 10 brokers: five new brokers own nothing (Pulsar's published test: 5-7 min).
    ids = _broker_ids(10)
    bundles = _namespaces([_spread(ids[:5], 40)] * 5, msg_rate_in=1068, rng=rng)
    scenarios.append(
        _cluster("scale-out-5-to-10", "10 brokers, 5 just added and owning nothing", ids, bundles)
    )

    # One hot broker with many small bundles: broker-1 owns 60 bundles (~0.95, overloaded),
    # the five others 40 bundles each (~0.4). Every busy broker of these scenarios owns
    # >= 40 bundles, so the TransferShedder's top-k report (10 % of them) holds at least 4
    # (with fewer than 20 it holds one bundle and that broker is never shed).
    ids = _broker_ids(6)
    hot = _namespace_bundles("t/hot", [ids[0]] * 60, msg_rate_in=965, rng=rng)
    rest = _namespaces([[i] * 40 for i in ids[1:]], msg_rate_in=610, rng=rng)
    scenarios.append(
        _cluster(
            "hot-broker-small-bundles",
            "one broker over 85 % with 60 small bundles",
            ids,
            hot + rest,
        )
    )

    # Brokers of different capacity: 3 big (16 cores, 10 Gbit/s NIC) and 3 small (4 cores,
    # 1 Gbit/s) with the same bundle count each: the small ones are overloaded.
    ids = _broker_ids(6)
    specs = [BrokerSpec(i, cores=16, nic_bytes=10 * GBIT_BYTES) for i in ids[:3]] + [
        BrokerSpec(i, cores=4) for i in ids[3:]
    ]
    bundles = _namespaces([_spread(ids, 80)] * 3, msg_rate_in=900, rng=rng)
    scenarios.append(
        _cluster("mixed-capacity", "3 big and 3 small brokers, equal bundle counts", specs, bundles)
    )

    # A namespace under an isolation policy: t/isolated may only use broker-1 and broker-2
    # (both named by the policy, so no other namespace may use them); all its bundles are on
    # broker-1 (~0.56), broker-2 owns nothing, brokers 3-6 carry the rest (~0.35).
    ids = _broker_ids(6)
    iso = _namespace_bundles("t/isolated", [ids[0]] * 48, msg_rate_in=710, rng=rng)
    rest = _namespaces([_spread(ids[2:], 80)] * 2, msg_rate_in=532, rng=rng)
    policy = IsolationPolicy(
        name="iso", namespaces=("t/isolated",), primary=("broker-1", "broker-2")
    )
    scenarios.append(
        _cluster(
            "isolation-policy",
            "t/isolated pinned to broker-1/2, all on broker-1",
            ids,
            iso + rest,
            (policy,),
        )
    )
    return scenarios


# ---- the shipped simulator scenarios (conf/scenarios/*.yaml) ----


def shipped_scenarios(paths: Iterable[Path]) -> list[ClusterScenario]:
    """One cluster scenario per cluster with >= 2 brokers: its namespaces' initial layouts,
    owners as the simulator places them (`balancer.sim.ownership.initial_owner`), bundle
    loads from the traffic model once its step and ramp changes are over."""
    out = []
    for path in paths:
        scenario = load_scenario(path)
        loads = ScenarioLoads(scenario)
        at_s = last_change_s(scenario)
        for cluster in scenario.clusters:
            if cluster.brokers < 2:
                continue
            ids = _broker_ids(cluster.brokers, start=0)
            bundles: list[BundleSpec] = []
            for index, ns in enumerate(scenario.namespaces):
                if ns.cluster != cluster.name:
                    continue
                layout = NamespaceBundles.initial(ns.name, ns.bundles)
                topics = loads.topic_loads(index, at_s)
                for bundle, members in topics_by_bundle(layout.bundles, topics).items():
                    rates = Rates(
                        sum(t.msg_rate_in for t in members),
                        sum(t.msg_rate_out for t in members),
                        sum(t.msg_throughput_in for t in members),
                        sum(t.msg_throughput_out for t in members),
                    )
                    owner = ids[initial_owner(ns.name, bundle, cluster.brokers)]
                    bundles.append(
                        BundleSpec(
                            ns.name,
                            bundle,
                            owner,
                            rates,
                            sum(t.sessions for t in members),
                            len(members),
                        )
                    )
            if bundles:
                out.append(
                    ClusterScenario(
                        f"{scenario.name}/{cluster.name}",
                        f"conf/scenarios/{Path(path).name}, cluster {cluster.name}",
                        tuple(BrokerSpec(i) for i in ids),
                        tuple(bundles),
                        built_in=False,
                    )
                )
    return out


def scaled(scenario: ClusterScenario, factor: float) -> ClusterScenario:
    """The scenario with every bundle's rates times `factor` (tests use tiny ones)."""
    bundles = tuple(
        replace(
            b,
            rates=Rates(
                *(
                    v * factor
                    for v in (
                        b.rates.msg_rate_in,
                        b.rates.msg_rate_out,
                        b.rates.throughput_in,
                        b.rates.throughput_out,
                    )
                )
            ),
        )
        for b in scenario.bundles
    )
    return replace(scenario, bundles=bundles)
