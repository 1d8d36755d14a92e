"""Small recorded rounds and windows for the replay layout and policy tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from balancer.core.broker_load import BrokerLoadReport, Resource, ResourceUsage
from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.window import ReplayWindow, WindowTopic

CLUSTER = "c"
NIC_KBIT = 1_000_000.0  # 1 Gbit/s in Kbit/s
CPU_LIMIT_PCT = 800.0  # 8 cores


def topic(name: str, *, msg_in: float, bytes_in: float, sessions: int = 2) -> TopicLoad:
    full = f"persistent://{name}"
    return TopicLoad(
        topic=full,
        position=hash_position(full),
        msg_rate_in=msg_in,
        msg_rate_out=msg_in,
        msg_throughput_in=bytes_in,
        msg_throughput_out=bytes_in,
        producer_count=sessions // 2,
        consumer_count=sessions - sessions // 2,
    )


def report(
    broker: str,
    bundles: Sequence[str],
    topics: Sequence[TopicLoad],
    *,
    base_cpu_pct: float = 20.0,
    cpu_pct_per_msg: float = 0.01,
    cluster: str = CLUSTER,
    timestamp_ms: int = 60_000,
) -> BrokerLoadReport:
    """A load report as the simulator writes one: cpu linear in msg/s, NIC in Kbit/s."""
    msg_in = sum(t.msg_rate_in for t in topics)
    msg_out = sum(t.msg_rate_out for t in topics)
    bytes_in = sum(t.msg_throughput_in for t in topics)
    bytes_out = sum(t.msg_throughput_out for t in topics)
    return BrokerLoadReport(
        cluster=cluster,
        broker=broker,
        timestamp_ms=timestamp_ms,
        resources={
            Resource.CPU: ResourceUsage(
                base_cpu_pct + cpu_pct_per_msg * (msg_in + msg_out), CPU_LIMIT_PCT
            ),
            Resource.MEMORY: ResourceUsage(1024.0, 8192.0),
            Resource.BANDWIDTH_IN: ResourceUsage(bytes_in * 8 / 1000, NIC_KBIT),
            Resource.BANDWIDTH_OUT: ResourceUsage(bytes_out * 8 / 1000, NIC_KBIT),
        },
        msg_rate_in=msg_in,
        msg_rate_out=msg_out,
        msg_throughput_in=bytes_in,
        msg_throughput_out=bytes_out,
        num_topics=len(topics),
        bundles=tuple(bundles),
    )


def recorded(
    owners: Mapping[str, str],
    layouts: Sequence[NamespaceBundles],
    topics: Sequence[TopicLoad],
    *,
    brokers: Sequence[str] = (),
    cluster: str = CLUSTER,
    round_ms: int = 60_000,
) -> tuple[RoundContext, list[WindowTopic]]:
    """A round whose reports match the topics' loads on the given layout and owners, and the
    window's topics as the brokers that owned them reported them."""
    by_broker: dict[str, list[TopicLoad]] = {b: [] for b in (*brokers, *owners.values())}
    window: list[WindowTopic] = []
    for t in topics:
        namespace = t.topic.split("://", 1)[1].rsplit("/", 1)[0]
        layout = next(ns for ns in layouts if ns.namespace == namespace)
        owner = owners[layout.find(t.position).key(namespace)]
        by_broker[owner].append(t)
        window.append(WindowTopic(cluster, t, owner))
    reports = tuple(
        report(b, sorted(k for k, o in owners.items() if o == b), by_broker[b], cluster=cluster)
        for b in sorted(by_broker)
    )
    return RoundContext(cluster, round_ms, reports), window


def window_of(ctx: RoundContext, topics: Sequence[WindowTopic]) -> ReplayWindow:
    return ReplayWindow.build(ctx.round_ms, topics, {ctx.cluster: ctx})
