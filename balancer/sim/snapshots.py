"""What the simulated brokers show at one moment: one topic's stats snapshot, and one broker's
`GET /admin/v2/broker-stats/topics` answer, cached per stats refresh with its JSON bytes
(tens of MB on big scenarios)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from balancer.sim.stats import TopicSnapshot, broker_topic_stats, heartbeat_stats

if TYPE_CHECKING:
    from balancer.sim.model import SimModel


def topic_snapshot(m: SimModel, i: int, elapsed_s: float, written: float) -> TopicSnapshot:
    """One topic's stats at `elapsed_s`, `written` bytes in, as Pulsar's broker computes them."""
    t = m.traffic.table
    rates = m.traffic.rates(elapsed_s)
    ns = m.namespaces[m.scenario.namespaces[int(t.namespace_index[i])].name]
    offloaded_bytes = m.storage.offloaded_bytes(i)
    # ManagedLedgerImpl.getTotalSize: offloaded ledgers stay counted until retention
    # deletes them (the simulator never trims), so an offload does not lower it.
    storage = int(written)
    backlog = int(min(float(rates.throughput_in[i] * t.backlog_s[i]), float(storage)))
    broker = ns.owners[ns.layout.find(int(t.positions[i]))]
    return TopicSnapshot(
        full_name=t.full_names[i],
        now_ms=m.scenario.start_ms + int(elapsed_s * 1000),
        start_ms=m.scenario.start_ms,
        owner_broker=m.clusters[ns.cluster].broker_address(broker),
        msg_rate_in=float(rates.msg_rate_in[i]),
        msg_rate_out=float(rates.msg_rate_out[i]),
        throughput_in=float(rates.throughput_in[i]),
        throughput_out=float(rates.throughput_out[i]),
        msg_size_bytes=float(t.msg_size_bytes[i]),
        producers=int(t.producers[i]),
        subscriptions=int(t.subscriptions[i]),
        consumers_per_subscription=int(t.consumers_per_subscription[i]),
        bytes_in_total=max(int(written - t.initial_storage_bytes[i]), 0),
        storage_size_bytes=storage,
        offloaded_size_bytes=offloaded_bytes,
        backlog_size_bytes=backlog,
        last_offload_ledger_id=m.storage.last_offloaded_ledger_id(i),
        last_offload_success_ms=int(m.storage.last_offload_success_ms[i]),
    )


class BrokerStatsView:
    """One broker's broker-stats answer as of the last stats refresh, rebuilt when the refresh
    tick or the layout version (a split, an unload, an ownership change) moves on."""

    def __init__(self, model: SimModel) -> None:
        self._model = model
        self._cache: dict[tuple[str, int], tuple[tuple[int, int], dict[str, Any]]] = {}
        self._payloads: dict[tuple[str, int], tuple[dict[str, Any], bytes]] = {}

    def document(self, cluster: str, broker: int) -> dict[str, Any] | None:
        """`broker-stats/topics` of one broker: the topics of the bundles it owns, nested
        namespace -> bundle -> "persistent" -> topic, as of the last stats refresh
        (PulsarStats.updateStats, every statsUpdateFrequencyInSecs); None before the first
        refresh (statsUpdateInitialDelayInSecs), when Pulsar answers with an empty body."""
        m = self._model
        with m.lock:
            m.settle()
            settings = m.scenario.broker
            interval = settings.stats_update_interval_s
            elapsed = m.elapsed_s()
            if elapsed < settings.stats_initial_delay_s:
                return None
            if interval > 0:
                elapsed = (elapsed // interval) * interval
            key = (int(elapsed * 1000), m.layout_version)
            cached = self._cache.get((cluster, broker))
            if cached is not None and cached[0] == key:
                return cached[1]
            written = m.traffic.bytes_written(elapsed)
            out: dict[str, Any] = {}
            for ns in m.namespaces.values():
                if ns.cluster != cluster:
                    continue
                by_bundle: dict[str, Any] = {}
                for bundle in ns.layout.bundles:
                    if ns.owners[bundle] != broker or bundle in ns.unowned:
                        continue
                    topics = {}
                    for i in (int(x) for x in m.bundle_slice(ns, bundle)):
                        snap = topic_snapshot(m, i, elapsed, float(written[i]))
                        topics[snap.full_name] = broker_topic_stats(
                            snap, expose_publishers=settings.expose_publisher_stats
                        )
                    if topics:
                        by_bundle[str(bundle)] = {"persistent": topics}
                if by_bundle:
                    out[ns.name] = by_bundle
            if settings.heartbeat_namespace:
                address = m.clusters[cluster].broker_address(broker)
                version = settings.heartbeat_topic_version
                out.update(heartbeat_stats(cluster, address, version))
            self._cache[(cluster, broker)] = (key, out)
            return out

    def payload(self, cluster: str, broker: int) -> bytes:
        """`document` serialised, cached with the snapshot (it can be tens of MB)."""
        m = self._model
        with m.lock:
            document = self.document(cluster, broker)
            if document is None:
                return b""  # no stats snapshot yet: an empty body, as Pulsar sends
            malformed = m.faults.malform_broker_stats(document)
            if malformed is not None:  # an injected fault: not cached, it may be cleared
                return json.dumps(malformed, separators=(",", ":")).encode("utf-8")
            cached = self._payloads.get((cluster, broker))
            if cached is not None and cached[0] is document:
                return cached[1]
            payload = json.dumps(document, separators=(",", ":")).encode("utf-8")
            self._payloads[(cluster, broker)] = (document, payload)
            return payload
