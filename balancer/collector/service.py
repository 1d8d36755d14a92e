"""The stats collector: broker-stats/topics of every cluster -> topic-stats events -> Kafka.

Each round asks every target (each broker of each cluster, listed again every round, or a
cluster's admin URL: `balancer.collector.targets`) for `GET /admin/v2/broker-stats/topics`,
all at once and to a deadline (`balancer.collector.rounds`), turns each topic's stats into
a `TopicStatsEvent` whose event time is the poll time of that broker, and sends them to a
Kafka topic in envelopes keyed by the namespace (at most `envelope_max_events` events and
`envelope_max_bytes` bytes each; Arrow IPC streams, or `{"events": [...]}` with
`envelope_format` "json": `balancer.core.envelopes`), or one JSON event per message keyed
by the topic name (`envelope_max_events` 0 or 1). No message is ever larger
than `envelope_max_bytes`: an envelope that would be is cut, and an event too large on its
own is not sent but counted (`oversized`) and logged once per topic. A target that fails
is counted by cluster, broker and reason (`PollFailure`) and retried (after `retry_s`,
until the next poll is due); it never stops or delays the others. An empty answer (a
broker before its first stats update) is "no data yet", and V1 namespace keys and the V2
heartbeat `pulsar/<host:port>` are skipped: both are counted, neither is a failure. Clock
and sleep are injected. With `round_markers`, rounds start on the interval's grid of the
wall clock and each ends with a round marker (`balancer.core.round_marker`). With
`contexts` (given when load reports are read: moves on), each round then publishes one
context record per cluster whose load reports it read (`balancer.core.context_record`),
after its stats and marker; a failed publish is counted by reason (a record over
`envelope_max_bytes` is not handed over: `too_large`) and logged, never raised.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from balancer.collector.failures import PollFailure, classify
from balancer.collector.ports import (
    BrokerLoadOut,
    CollectorMetricsSink,
    ContextOut,
    ContextTooLarge,
    DeadLetterOut,
    EventSink,
    Fetch,
    Fetched,
    RejectedSample,
    TopicStatsSample,
)
from balancer.collector.rounds import (
    DEFAULT_MAX_PARALLEL_PER_CLUSTER,
    FetchResult,
    RoundRunner,
    fixed_targets,
    next_round_ms,
    round_wait_s,
)
from balancer.collector.targets import BrokerDirectory, BrokerLister, Target
from balancer.core.broker_load import BrokerLoadReport
from balancer.core.context_record import ContextPublishFailure, context_key, encode_context
from balancer.core.envelopes import (
    DEFAULT_ENVELOPE_FORMAT,
    DEFAULT_ENVELOPE_MAX_BYTES,
    DEFAULT_ENVELOPE_MAX_EVENTS,
    ENVELOPE_FORMATS,
    RECORD_OVERHEAD_BYTES,
    EnvelopeFormat,
    Oversized,
    pack,
    record_bytes,
)
from balancer.core.events import TopicStatsEvent
from balancer.core.replay.recording import RoundContext
from balancer.core.round_marker import MARKER_KEY, encode_round_marker

log = logging.getLogger(__name__)


@dataclass
class CollectorCounts:
    polls: int = 0
    events: int = 0
    markers: int = 0  # round markers sent (`round_markers`)
    messages: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # cluster -> failed fetches
    # (cluster, broker label, PollFailure) -> failed fetches
    failure_reasons: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # cluster -> answers that held no stats yet (a broker before its first stats update)
    no_data: Counter[str] = field(default_factory=Counter)
    # cluster -> V1 namespace keys and V2 heartbeats skipped (each once per answer holding it)
    skipped_namespaces: Counter[str] = field(default_factory=Counter)
    # cluster -> events not sent: larger than envelope_max_bytes on their own
    oversized: Counter[str] = field(default_factory=Counter)
    # (cluster, reason) -> malformed topic entries left out of answers, dead-lettered
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    last_success_ms: dict[str, int] = field(default_factory=dict)  # cluster -> poll time
    # (cluster, broker label) -> poll time of its last answer read ("no data yet" included)
    broker_last_success_ms: dict[tuple[str, str], int] = field(default_factory=dict)
    # cluster -> poll time of the newest answer read from any of its brokers, the cluster's
    # brokers known: reads through the admin URL of a cluster never listed do not count
    last_read_ms: dict[str, int] = field(default_factory=dict)
    # cluster -> its last answer came through the admin URL alone (brokers never listed)
    partial: dict[str, bool] = field(default_factory=dict)
    # cluster -> its last failure or answer said 401/403 (cleared by an answer read)
    unauthorized: dict[str, bool] = field(default_factory=dict)
    contexts: int = 0  # context records handed to the context topic (`contexts`)
    # cluster -> context records that could not be handed over (logged each time)
    context_failures: Counter[str] = field(default_factory=Counter)


class Collector:
    def __init__(
        self,
        *,
        targets: Sequence[Target],
        fetch: Fetch,
        sink: EventSink,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        monotonic: Callable[[], float] = time.monotonic,
        envelope_max_events: int = DEFAULT_ENVELOPE_MAX_EVENTS,
        envelope_max_bytes: int = DEFAULT_ENVELOPE_MAX_BYTES,
        envelope_format: EnvelopeFormat = DEFAULT_ENVELOPE_FORMAT,
        metrics: CollectorMetricsSink | None = None,
        dead_letters: DeadLetterOut | None = None,
        broker_listers: Mapping[str, BrokerLister] | None = None,
        round_deadline_s: float | None = None,
        max_parallel_per_cluster: int = DEFAULT_MAX_PARALLEL_PER_CLUSTER,
        broker_loads: BrokerLoadOut | None = None,
        round_markers: bool = False,
        contexts: ContextOut | None = None,
    ) -> None:
        """`targets`: what to poll at first; `broker_listers`: clusters whose brokers are
        listed again every round (`BrokerDirectory`). `round_deadline_s`: how long a round
        waits for answers (default: `run`'s interval). `round_markers`: `run` aligns its
        rounds and marks each complete (the config's `collector.round_markers`). `contexts`:
        where each round's context record goes, one per cluster whose load reports were read
        (given only when they are read: moves on)."""
        if envelope_max_events < 0:
            raise ValueError("envelope_max_events must be >= 0 (0 or 1: one event per message)")
        if envelope_max_bytes <= RECORD_OVERHEAD_BYTES:
            raise ValueError(f"envelope_max_bytes must be > {RECORD_OVERHEAD_BYTES}")
        if envelope_format not in ENVELOPE_FORMATS:
            raise ValueError(f"envelope_format must be one of {', '.join(ENVELOPE_FORMATS)}")
        if round_deadline_s is not None and round_deadline_s <= 0:
            raise ValueError("round_deadline_s must be > 0")
        self.directory = BrokerDirectory(targets, broker_listers)
        self.fetch = fetch
        self.sink = sink
        self.clock_ms = clock_ms
        self.monotonic = monotonic
        self.envelope_max_events = envelope_max_events
        self.envelope_max_bytes = envelope_max_bytes
        self.envelope_format: EnvelopeFormat = envelope_format
        self.round_deadline_s = round_deadline_s
        self.counts = CollectorCounts()
        self.metrics = metrics
        self.dead_letters = dead_letters
        self.broker_loads = broker_loads
        self.round_markers = round_markers
        self.contexts = contexts
        # cluster -> broker -> the load report read this round (contexts only)
        self._round_reports: dict[str, dict[str, BrokerLoadReport]] = {}
        self._logged_rejects: set[tuple[str, str]] = set()  # (cluster, topic) logged once
        self._rounds: RoundRunner[Iterable[tuple[str, TopicStatsSample]] | Fetched] = RoundRunner(
            fetch,
            clock_ms=clock_ms,
            monotonic=monotonic,
            max_parallel_per_cluster=max_parallel_per_cluster,
        )
        self._should_stop: Callable[[], bool] = lambda: False  # set by `run`
        self._brokers_reported: dict[str, tuple[str, ...]] = {}
        self._logged_skips: set[tuple[str, str]] = set()  # (cluster, namespace) logged once
        self._logged_oversized: set[tuple[str, str]] = set()  # (cluster, topic) logged once

    @property
    def targets(self) -> tuple[Target, ...]:
        """Every target as last listed."""
        return self.directory.targets()

    def poll_once(
        self, targets: Sequence[Target] | None = None, *, deadline_s: float | None = None
    ) -> list[Target]:
        """Poll `targets` (default: every cluster's brokers, listed again) once, all at once.

        Waits at most `deadline_s` (default `round_deadline_s`; None: until every fetch
        ends); returns the targets that failed or did not answer in time.
        """
        self.counts.polls += 1
        wait_s = deadline_s if deadline_s is not None else self.round_deadline_s
        deadline = self.monotonic() + wait_s if wait_s is not None else float("inf")
        if targets is None:
            plan = {c: _targets_of(self.directory, c) for c in self.directory.clusters}
            refresh: Callable[[str], None] | None = self.directory.refresh
        else:
            by_cluster: dict[str, list[Target]] = {}
            for target in targets:
                by_cluster.setdefault(target.cluster, []).append(target)
            plan = {c: fixed_targets(ts) for c, ts in by_cluster.items()}
            refresh = None
        failed = [
            result.target
            for result in self._rounds.run(
                plan, deadline=deadline, refresh=refresh, should_stop=self._should_stop
            )
            if not self._take(result)
        ]
        if refresh is not None:
            self._report_brokers()
        self.sink.flush()
        return failed

    def _take(self, result: FetchResult[Iterable[tuple[str, TopicStatsSample]] | Fetched]) -> bool:
        """Send one target's answer; False when it failed (counted and logged)."""
        target = result.target
        events: list[TopicStatsEvent] = []
        fetched: Fetched | None = None
        error = result.error
        if error is None:
            answer = result.answer
            fetched = answer if isinstance(answer, Fetched) else Fetched(list(answer or ()))
            try:
                events = [
                    stats.to_event(
                        cluster=target.cluster,
                        topic=topic,
                        timestamp_ms=result.poll_ms,
                        broker=target.broker,
                    )
                    for topic, stats in fetched.samples
                ]
            except Exception as exc:  # a sample that cannot become an event
                error = exc
        if error is not None or fetched is None:
            reason = classify(error) if error is not None else PollFailure.OTHER
            self._note_failure(target, reason, error)
            return False
        self._note_skipped(target, fetched.skipped_namespaces)
        oversized = 0 if fetched.no_data else self._send(target.cluster, events)
        rejected = self._reject(target, result.poll_ms, fetched.rejected)
        if self.metrics is not None:
            self.metrics.record_collector_answer(
                target.cluster,
                skipped_namespaces=len(fetched.skipped_namespaces),
                no_data=fetched.no_data,
                oversized_events=oversized,
                rejected_entries=rejected,
            )
        self._note_read(target, result.poll_ms)
        if self.contexts is not None and fetched.broker_load is not None:
            self._keep_report(target, fetched)
        if self.broker_loads is not None and target.broker is not None:
            self.broker_loads.record_poll(
                target.cluster,
                target.broker,
                poll_ms=result.poll_ms,
                report=fetched.broker_load,
                owned_bundles=fetched.owned_bundles,
            )
        if fetched.no_data:
            self.counts.no_data[target.cluster] += 1
            log.info("collector: %s has no stats yet (before its first stats update)", target)
            return True
        self.counts.events += len(events) - oversized
        self.counts.last_success_ms[target.cluster] = result.poll_ms
        return True

    def _keep_report(self, target: Target, fetched: Fetched) -> None:
        report = fetched.broker_load
        if report is None or target.broker is None:
            return
        if not report.bundles and fetched.owned_bundles:
            # The metrics route (extensible load manager) lists no bundles: those the
            # broker reported topics of in the same answer stand in (the same set as the
            # modular report's: LocalBrokerData.updateBundleData keeps its bundle stats' keys).
            report = replace(report, bundles=tuple(sorted(fetched.owned_bundles)))
        self._round_reports.setdefault(target.cluster, {})[target.broker] = report

    def _publish_contexts(self, round_ms: int) -> None:
        """One context record per cluster whose load reports were read this round. A
        failure is counted and logged, never raised: the round's stats are out already."""
        reports, self._round_reports = self._round_reports, {}
        if self.contexts is None:
            return
        for cluster, by_broker in sorted(reports.items()):
            context = RoundContext(
                cluster=cluster,
                round_ms=round_ms,
                reports=tuple(by_broker[b] for b in sorted(by_broker)),
            )
            failure = self._publish_context(self.contexts, context)
            if failure is None:
                self.counts.contexts += 1
                continue
            reason, why = failure
            self.counts.context_failures[cluster] += 1
            if self.metrics is not None:
                self.metrics.context_publish_failed(reason.value)
            log.warning(
                "collector: the context record of %s for round %d was not published (%s: "
                "%s); counted, the replay will miss this round's load reports",
                cluster,
                round_ms,
                reason.value,
                why,
            )

    def _publish_context(
        self, out: ContextOut, context: RoundContext
    ) -> tuple[ContextPublishFailure, str] | None:
        """Hand one context record to `out`; None when it was, else why not."""
        key = context_key(context.cluster)
        try:
            value = encode_context(context)
        except ValueError as exc:  # a figure JSON cannot hold: the next round's may be fine
            return ContextPublishFailure.INVALID_REPORT, _describe(exc)
        size = record_bytes(key, value)
        if size > self.envelope_max_bytes:
            # The producer refuses a record over its max_request_size (this same limit):
            # said here with the figures, not as the producer's error.
            return ContextPublishFailure.TOO_LARGE, (
                f"{size} bytes with {sum(len(r.bundles) for r in context.reports)} bundles, "
                f"over collector.envelope_max_bytes {self.envelope_max_bytes}: raise it and the "
                "context topic's max.message.bytes"
            )
        try:
            out.publish_context(key=key, value=value, timestamp_ms=context.round_ms)
        except ContextTooLarge as exc:  # the producer's own limit is lower
            return ContextPublishFailure.TOO_LARGE, _describe(exc)
        except Exception as exc:  # Kafka away: the next round tries
            return ContextPublishFailure.SEND_FAILED, _describe(exc)
        return None

    def _note_failure(
        self, target: Target, reason: PollFailure, error: BaseException | None
    ) -> None:
        self.counts.failures[target.cluster] += 1
        self.counts.failure_reasons[(target.cluster, target.label, reason.value)] += 1
        if reason is PollFailure.UNAUTHORIZED:
            self.counts.unauthorized[target.cluster] = True
        if self.metrics is not None:
            self.metrics.record_poll(
                target.cluster, target.label, failure=reason.value, at_s=self.clock_ms() / 1000
            )
        log.warning(
            "collector: polling %s failed (%s): %s",
            target,
            reason.value,
            _describe(error) if error is not None else "no answer",
        )

    def _note_read(self, target: Target, poll_ms: int) -> None:
        self.counts.broker_last_success_ms[(target.cluster, target.label)] = poll_ms
        partial = self.directory.partial(target.cluster)
        self.counts.partial[target.cluster] = partial
        if not partial:  # one broker of an unlisted cluster is no read of the cluster
            newest = max(poll_ms, self.counts.last_read_ms.get(target.cluster, poll_ms))
            self.counts.last_read_ms[target.cluster] = newest
        self.counts.unauthorized[target.cluster] = False
        if self.metrics is not None:
            at_s = poll_ms / 1000
            self.metrics.record_poll(target.cluster, target.label, failure=None, at_s=at_s)

    def _report_brokers(self) -> None:
        for cluster in self.directory.clusters:
            labels = tuple(t.label for t in self.directory.targets(cluster))
            if self._brokers_reported.get(cluster) != labels:
                self._brokers_reported[cluster] = labels
                live = set(labels)
                for key in [k for k in self.counts.broker_last_success_ms if k[0] == cluster]:
                    if key[1] not in live:  # a broker gone from the cluster
                        del self.counts.broker_last_success_ms[key]
                if self.metrics is not None:
                    partial = self.directory.partial(cluster)
                    self.metrics.set_brokers(cluster, labels, partial=partial)

    def _reject(
        self, target: Target, poll_ms: int, entries: Sequence[RejectedSample]
    ) -> Counter[str]:
        """Dead-letter malformed topic entries (the rest of the answer was used): counted by
        reason, logged once per topic."""
        by_reason: Counter[str] = Counter()
        for entry in entries:
            reason = str(entry.reason)
            by_reason[reason] += 1
            self.counts.rejected[(target.cluster, reason)] += 1
            if self.dead_letters is not None:
                self.dead_letters.dead_letter(
                    key=f"collector/{target.cluster}/{target.label}/{entry.topic}".encode(),
                    value=entry.excerpt.encode(),
                    headers=[
                        ("reason", reason.encode()),
                        ("detail", entry.detail.encode()),
                        ("source", b"collector"),
                        ("cluster", target.cluster.encode()),
                        ("broker", target.label.encode()),
                        ("poll_ms", str(poll_ms).encode()),
                    ],
                )
            if (target.cluster, entry.topic) not in self._logged_rejects:
                self._logged_rejects.add((target.cluster, entry.topic))
                log.warning(
                    "collector: %s: topic entry %s rejected (%s: %s); the rest of the answer "
                    "is used; dead-lettered, counted, logged once",
                    target,
                    entry.topic,
                    reason,
                    entry.detail,
                )
        return by_reason

    def _note_skipped(self, target: Target, namespaces: Sequence[str]) -> None:
        self.counts.skipped_namespaces[target.cluster] += len(namespaces)
        for namespace in namespaces:
            if (target.cluster, namespace) not in self._logged_skips:
                self._logged_skips.add((target.cluster, namespace))
                log.info(
                    "collector: %s reports namespace %s (V1, or the broker's heartbeat): "
                    "skipped, counted, logged once",
                    target,
                    namespace,
                )

    def _send(self, cluster: str, events: Sequence[TopicStatsEvent]) -> int:
        """Send `events` as messages within the caps; returns the events too large to send."""
        oversized = 0
        for item in pack(
            events,
            max_events=self.envelope_max_events,
            max_bytes=self.envelope_max_bytes,
            envelope_format=self.envelope_format,
        ):
            if isinstance(item, Oversized):
                self._note_oversized(cluster, item.event, item.size_bytes)
                oversized += 1
                continue
            self.sink.send(key=item.key, value=item.value, events=item.events)
            self.counts.messages += 1
        return oversized

    def _note_oversized(self, cluster: str, event: TopicStatsEvent, size_bytes: int) -> None:
        self.counts.oversized[cluster] += 1
        if (cluster, event.topic) not in self._logged_oversized:
            self._logged_oversized.add((cluster, event.topic))
            log.warning(
                "collector: the event of %s (%s) needs a message of %d bytes, more than "
                "collector.envelope_max_bytes (%d): not sent, counted, logged once",
                event.topic,
                cluster,
                size_bytes,
                self.envelope_max_bytes,
            )

    def run(
        self,
        *,
        interval_s: float,
        retry_s: float = 10.0,
        should_stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
        max_polls: int | None = None,
    ) -> CollectorCounts:
        """Poll every `interval_s`, retrying failed targets every `retry_s` in between.

        A round waits for answers until `round_deadline_s` (default: `interval_s`), a retry
        until the next poll is due, so no cluster holds up the next round of the others.
        """
        if interval_s <= 0 or retry_s <= 0:
            raise ValueError("interval_s and retry_s must be > 0")
        round_s = round_wait_s(interval_s, self.round_deadline_s)
        self._should_stop = should_stop
        rounds = 0
        next_ms = 0  # with round markers: when the next round starts (epoch ms)
        interval_ms = max(1, round(interval_s * 1000))
        while not should_stop() and (max_polls is None or rounds < max_polls):
            started = self.monotonic()
            next_poll = started + interval_s
            if self.round_markers:
                # The last marker promised nothing older than `next_ms`: a sleep timed on
                # the monotonic clock may wake a little before the wall clock gets there.
                while next_ms > (now_ms := self.clock_ms()) and not should_stop():
                    sleep((next_ms - now_ms) / 1000)
                # The next round on the interval's grid: each window of the interval's
                # length then holds one round (the first round starts at once).
                next_ms = next_round_ms(now_ms, interval_s)
                next_poll = started + (next_ms - now_ms) / 1000
            # The round's time on the interval's grid: the window its events fall in.
            round_ms = self.clock_ms() // interval_ms * interval_ms
            self._round_reports = {}  # what `poll_once` read outside `run` is no round's
            failed = self.poll_once(deadline_s=round_s)
            rounds += 1
            while failed and not should_stop() and self.monotonic() + retry_s < next_poll:
                sleep(retry_s)
                if should_stop():
                    break
                busy = self._rounds.busy()  # still fetching: asking again would not help
                retry = [t for t in failed if t not in busy]
                if not retry:
                    continue
                failed = self.poll_once(retry, deadline_s=next_poll - self.monotonic())
            if self.round_markers and not should_stop():
                # Nothing of this round will come any more (its events are flushed, a late
                # answer is dropped) and the next round's events are stamped from `next_ms`.
                self.sink.send(key=MARKER_KEY, value=encode_round_marker(next_ms), events=0)
                self.counts.markers += 1
            # After the stats and the marker: a slow or failing context never delays them.
            self._publish_contexts(round_ms)
            if max_polls is not None and rounds >= max_polls:
                break
            remaining = next_poll - self.monotonic()
            if remaining > 0 and not should_stop():
                sleep(remaining)
        return self.counts


def _targets_of(directory: BrokerDirectory, cluster: str) -> Callable[[], Sequence[Target]]:
    return lambda: directory.targets(cluster)


def _describe(exc: BaseException) -> str:
    # Error texts from the admin client carry no credentials; keep them short.
    return f"{type(exc).__name__}: {str(exc)[:200]}"
