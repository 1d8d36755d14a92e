"""What the collector saw of each broker, kept for the windows the stream closes.

The collector reads every broker each round; with each broker-stats answer it hands over the
bundles the broker reported (those with topics) and, when the broker answers it, its load
report (`GET /admin/v2/broker-stats/load-report`). A broker's load reports are a few dozen a
window, not millions of events: they are windowed here, on the stream's window bounds, rather
than through Kafka and Spark. The handler asks for a window when the stream closes it.

Thread-safe: the collector records from its threads, the handler reads from the stream's.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from balancer.core.broker_load import BrokerLoadReport


@dataclass(frozen=True, slots=True)
class BrokerSample:
    """One poll of one broker."""

    cluster: str
    broker: str  # broker id host:port
    poll_ms: int
    report: BrokerLoadReport | None  # None: no load report (extensible load manager, off)
    owned_bundles: frozenset[str]  # "tenant/ns/0x.._0x.." with topics, from broker-stats


@dataclass(frozen=True, slots=True)
class BrokerWindow:
    """One broker over one window: its load reports in the window, and what it owns now."""

    cluster: str
    broker: str
    reports: tuple[BrokerLoadReport, ...]
    owned_bundles: frozenset[str]  # its newest sample's (the owner a move starts from)
    last_poll_ms: int


class BrokerLoadBoard:
    def __init__(self, *, retain_ms: int) -> None:
        """`retain_ms`: how long samples are kept (a few windows: the stream closes a window
        up to its watermark delay after its end)."""
        if retain_ms <= 0:
            raise ValueError("retain_ms must be > 0")
        self.retain_ms = retain_ms
        self._samples: dict[tuple[str, str], deque[BrokerSample]] = {}
        self._lock = threading.Lock()

    def record(self, sample: BrokerSample) -> None:
        report = sample.report
        if report is not None and report.timestamp_ms != sample.poll_ms:
            # A report is timed by the poll that read it, on the balancer's clock: Pulsar's
            # lastUpdate is its last write to the metadata store, not its sample time.
            sample = replace(sample, report=replace(report, timestamp_ms=sample.poll_ms))
        with self._lock:
            samples = self._samples.setdefault((sample.cluster, sample.broker), deque())
            samples.append(sample)
            oldest_ms = sample.poll_ms - self.retain_ms
            while samples and samples[0].poll_ms < oldest_ms:
                samples.popleft()
            # A broker no longer polled (gone from its cluster) ages out as a whole.
            for key in [k for k, v in self._samples.items() if v[-1].poll_ms < oldest_ms]:
                del self._samples[key]

    def record_poll(
        self,
        cluster: str,
        broker: str,
        *,
        poll_ms: int,
        report: BrokerLoadReport | None,
        owned_bundles: frozenset[str],
    ) -> None:
        """The collector's `BrokerLoadOut`: one broker's poll."""
        self.record(BrokerSample(cluster, broker, poll_ms, report, owned_bundles))

    def forget(self, cluster: str, live_brokers: Iterable[str]) -> None:
        """Drop brokers no longer listed in `cluster` (a broker removed is no destination)."""
        live = set(live_brokers)
        with self._lock:
            for key in [k for k in self._samples if k[0] == cluster and k[1] not in live]:
                del self._samples[key]

    def window(self, cluster: str, *, start_ms: int, end_ms: int) -> list[BrokerWindow]:
        """Every broker of `cluster` polled since `start_ms`: its reports within
        [start_ms, end_ms) (the newest one before `start_ms` when none falls inside, so a
        slow poll still gives a load) and its newest ownership."""
        out: list[BrokerWindow] = []
        with self._lock:
            for (name, broker), samples in sorted(self._samples.items()):
                if name != cluster or not samples or samples[-1].poll_ms < start_ms:
                    continue
                inside = [
                    s.report
                    for s in samples
                    if s.report is not None and start_ms <= s.poll_ms < end_ms
                ]
                if not inside:
                    earlier = [s.report for s in samples if s.report is not None]
                    inside = earlier[-1:]
                out.append(
                    BrokerWindow(
                        cluster=cluster,
                        broker=broker,
                        reports=tuple(inside),
                        owned_bundles=samples[-1].owned_bundles,
                        last_poll_ms=samples[-1].poll_ms,
                    )
                )
        return out

    def clusters(self) -> list[str]:
        with self._lock:
            return sorted({cluster for cluster, _ in self._samples})
