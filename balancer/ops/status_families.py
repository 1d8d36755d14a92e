"""Families read from a component's own status at every scrape: the writer lease, token
files, the drain marks' reader.

Built fresh on every scrape (as the bundle snapshot's), so nothing here can go stale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from balancer.core.lease import LeaseStatus
from balancer.ops.collector_metrics import PREFIX


class WriterLeaseFamilies(Collector):
    """The single-writer lease as this process sees it, read at every scrape."""

    def __init__(self, status: Callable[[], LeaseStatus]) -> None:
        self._status = status

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self._families())

    def collect(self) -> Iterable[GaugeMetricFamily]:
        held, holder = self._families()
        status = self._status()
        held.add_metric([], 1.0 if status.held else 0.0)
        if status.holder is not None:  # one series: the holder as last known
            holder.add_metric([status.holder], 1.0)
        return held, holder

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}_writer_lease_held",
                "1 while this balancer holds the peer group's single-writer lease and may act "
                "on Pulsar; 0 on a standby (it decides, touches nothing).",
            ),
            GaugeMetricFamily(
                f"{PREFIX}_writer_lease_holder_info",
                "1, labelled with the balancer that holds the single-writer lease as this "
                "one last heard (host:pid); absent while unknown.",
                labels=["holder"],
            ),
        )


class TokenFileFamilies(Collector):
    """`token_file_problem` per cluster, read from the admin client on every scrape."""

    def __init__(self, clusters: Sequence[str], problems: Callable[[], Mapping[str, str]]):
        self._clusters = tuple(clusters)
        self._problems = problems

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return (self._family(),)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = self._family()
        problems = self._problems()
        for cluster in self._clusters:
            family.add_metric([cluster], 1.0 if cluster in problems else 0.0)
        return (family,)

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{PREFIX}_token_file_problem",
            "1 while the cluster's token file is deleted, unreadable or empty (the last good "
            "token is sent meanwhile; the log says which file).",
            labels=["cluster"],
        )


class DrainMarksFamilies(Collector):
    """The drain marks' reader: records skipped and re-reads that failed, at every scrape."""

    def __init__(self, bad_records: Callable[[], int], read_failures: Callable[[], int]):
        self._bad_records = bad_records
        self._read_failures = read_failures

    def describe(self) -> Iterable[CounterMetricFamily]:
        return self._families()

    def collect(self) -> Iterable[CounterMetricFamily]:
        bad, failures = self._families()
        bad.add_metric([], float(self._bad_records()))
        failures.add_metric([], float(self._read_failures()))
        return bad, failures

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                f"{PREFIX}_drain_marks_bad_records",
                "Records of the drain marks topic that are no mark, skipped (the log names "
                "each one's offset and reason).",
            ),
            CounterMetricFamily(
                f"{PREFIX}_drain_marks_read_failures",
                "Re-reads of the drain marks topic that failed (Kafka away): the marks read "
                "before are used meanwhile.",
            ),
        )
