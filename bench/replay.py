"""Benchmark: a replay of a recording (issue 44's target: a day of 100,000 topics at Pulsar's
60 s stats period, 144M topic samples, replays in at most 10 minutes on one 2-core machine,
memory bounded by the topics of one window, not the recording's length).

Generates a recording as the collector writes one (envelopes of `--envelope` events keyed by
namespace, Arrow unless `--envelope-format json`, a round marker after each round, and each
round's load reports as context; `--hot-namespaces N` namespaces turn busier along it),
streams it into `balancer.app.replay.windows.stream_windows` (the stream's own code in
batch, Spark) and steps the policies on every closed window (`balancer.app.replay.engine`).
Prints the phases' times, samples per second, the driver's peak RSS (VmHWM) and the
windows' count; ends with `RESULT <json>`.

    python -m bench.replay                       # 5,000 topics x 30 rounds (150k samples)
    python -m bench.replay --topics 100000 --rounds 1440 --rounds-per-batch 30 \
        --recording-dir DIR --hot-namespaces 10  # a day, read from disk, every policy acting

Every policy runs (ours and Pulsar's three) unless `--ours-only`. `--master spark://...`
runs the stream on a standalone cluster (`bench/spark_cluster.py`; `--cluster-workers N`
starts one of N one-core workers for the run).

The generation of the recording runs in the thread that writes the micro-batch files
beside the stream (`write_files_s`, its CPU `write_files_cpu_s`): its share is printed
beside it (`generation_s`). Where the rest goes (`phases_s`): `stream` is the
engine waiting for the next closed window (Spark's batches, less what overlaps the engine's
work), `decode` the window's topic rows decoded (once for every policy) and, for Pulsar's
policies, each topic's row once, sorted by namespace and position, `windows` the Pulsar
policies' shared window (numpy columns per namespace) built from them, `observe` the
recorded rounds handed to every policy, and each policy's own steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from balancer.app.config import BalancerConfig
from balancer.app.replay.engine import PolicyWrapper, ReplayPolicy, run_replay
from balancer.app.replay.ours import OursPolicy
from balancer.app.replay.pulsar_policies import (
    PULSAR_POLICIES,
    SharedWindows,
    pulsar_replay_policies,
)
from balancer.app.replay.windows import (
    ClosedWindow,
    StreamCounts,
    WindowSettings,
    stream_windows,
)
from balancer.core.arrow_envelope import encode_envelope
from balancer.core.broker_load import BrokerLoadReport, Resource, ResourceUsage
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.context_record import context_key, encode_context
from balancer.core.envelopes import DEFAULT_ENVELOPE_FORMAT, ENVELOPE_FORMATS, EnvelopeFormat
from balancer.core.events import TopicStatsEvent
from balancer.core.hashing import hash_positions
from balancer.core.replay.recording import RecordedMessage, RoundContext
from balancer.core.replay.result import ReplayAction, WindowSample
from balancer.core.replay.window import ReplayWindow
from balancer.core.round_marker import MARKER_KEY, encode_round_marker
from bench.common import header, machine, print_result

START_MS = 1_790_000_040_000  # on the minute
TOPICS_PER_NAMESPACE = 1_000
BROKERS = 4
# A hot namespace's topics are this much busier from its onset: its four bundles then carry
# ~35,000 msg/s each (in + out), over the default 30,000 (`max_msg_rate`), so every policy
# acts on them (a split each, then the halves are under).
HOT_FACTOR = 4.0
# A broker's cpu in the recorded load reports: idle, and before any namespace turns hot.
CPU_IDLE_PCT = 5.0
CPU_COLD_PCT = 50.0


def _vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def namespaces(topics: int) -> list[str]:
    return [f"bench/ns-{k}" for k in range(max(1, -(-topics // TOPICS_PER_NAMESPACE)))]


def hot_onsets(namespace_count: int, hot_namespaces: int, rounds: int) -> dict[int, int]:
    """Namespace index -> the round its topics turn hot (`HOT_FACTOR`): `hot_namespaces`
    namespaces spread over the namespaces, their onsets spread over the recording from round
    1 on, so the policies act all along it, not only at its start."""
    hot = min(hot_namespaces, namespace_count)
    if hot <= 0:
        return {}
    return {j * namespace_count // hot: 1 + j * max(1, rounds - 1) // hot for j in range(hot)}


def messages(
    topics: int,
    rounds: int,
    interval_s: int,
    envelope: int,
    envelope_format: EnvelopeFormat = DEFAULT_ENVELOPE_FORMAT,
    hot_namespaces: int = 0,
) -> Iterator[RecordedMessage]:
    """The stats topic: each round's events in envelopes per namespace (Arrow or JSON, as the
    collector's `envelope_format`), then its marker. `hot_namespaces` of the namespaces turn
    `HOT_FACTOR` busier at their onsets (`hot_onsets`) and stay so."""
    offset = 0
    names = namespaces(topics)
    onsets = hot_onsets(len(names), hot_namespaces, rounds)
    for r in range(rounds):
        at = START_MS + r * interval_s * 1000
        for k, ns in enumerate(names):
            count = min(TOPICS_PER_NAMESPACE, topics - k * TOPICS_PER_NAMESPACE)
            scale = HOT_FACTOR if k in onsets and r >= onsets[k] else 1.0
            for first in range(0, count, envelope):
                chunk = range(first, min(count, first + envelope))
                if envelope_format == "arrow":
                    value = encode_envelope([_event(ns, i, r, at, scale) for i in chunk])
                else:
                    value = _json_envelope(ns, chunk, r, at, scale)
                yield RecordedMessage(k % 4, offset, at + 500, ns.encode(), value)
                offset += 1
        until = at + interval_s * 1000
        yield RecordedMessage(0, offset, at + 900, MARKER_KEY, encode_round_marker(until))
        offset += 1


def _event(ns: str, i: int, r: int, at: int, scale: float = 1.0) -> TopicStatsEvent:
    return TopicStatsEvent(
        cluster="c1",
        topic=f"persistent://{ns}/t{i}",
        timestamp_ms=at + 5,
        msgRateIn=(10.0 + (i + r) % 7) * scale,
        msgRateOut=(20.0 + i % 5) * scale,
        msgThroughputIn=1000.0 + i,
        msgThroughputOut=2000.0 + i,
        storageSize=1000 * i,
        backlogSize=0,
        offloadedStorageSize=0,
        producerCount=1,
        consumerCount=2,
    )


def _json_envelope(ns: str, chunk: range, r: int, at: int, scale: float = 1.0) -> bytes:
    # The same events as `_event`'s, written directly (json.dumps per event is slower).
    events = ",".join(
        f'{{"cluster":"c1","topic":"persistent://{ns}/t{i}","timestamp_ms":{at + 5},'
        f'"msgRateIn":{(10.0 + (i + r) % 7) * scale},"msgRateOut":{(20.0 + i % 5) * scale},'
        f'"msgThroughputIn":{1000.0 + i},"msgThroughputOut":{2000.0 + i},'
        f'"storageSize":{1000 * i},"backlogSize":0,"offloadedStorageSize":0,'
        f'"producerCount":1,"consumerCount":2}}'
        for i in chunk
    )
    return f'{{"events":[{events}]}}'.encode()


@dataclass(frozen=True)
class _BundleSums:
    """The recorded rates of one initial bundle's topics (`_event`'s), summed."""

    rate_in_by_residue: tuple[float, ...]  # msgRateIn summed, by round % 7 (unscaled)
    rate_out: float  # msgRateOut summed (unscaled)
    throughput_in: float  # bytes/s
    throughput_out: float
    topics: int


def _bundle_sums(layout: NamespaceBundles, count: int) -> list[_BundleSums]:
    """Each of the layout's bundles' sums of `_event`'s rates over the namespace's `count`
    topics, found by their hash positions as Pulsar finds them."""
    ns = layout.namespace
    bundles = layout.bundles
    members: dict[BundleRange, list[int]] = {b: [] for b in bundles}
    for i, position in enumerate(hash_positions([f"persistent://{ns}/t{i}" for i in range(count)])):
        members[layout.find(position)].append(i)
    return [
        _BundleSums(
            tuple(float(sum(10 + (i + residue) % 7 for i in m)) for residue in range(7)),
            float(sum(20 + i % 5 for i in m)),
            float(sum(1000 + i for i in m)),
            float(sum(2000 + i for i in m)),
            len(m),
        )
        for m in (members[b] for b in bundles)
    ]


def contexts(
    topics: int, rounds: int, interval_s: int, hot_namespaces: int = 0
) -> Iterator[RoundContext]:
    """Each round's load reports, true to `messages`' topics: the bundles dealt round-robin
    over the brokers, each broker's msg rates and throughput its bundles' topics' sums that
    round (hot namespaces included), and its cpu `CPU_IDLE_PCT` plus a cost per msg/s that
    puts a broker at `CPU_COLD_PCT` before any namespace turns hot. (A replay corrects a
    broker's recorded cpu by the msg rate moved at its cpu over msg rate: reports whose rates
    were not their bundles' made every move look like several cores.)"""
    brokers = [f"b{b}:8080" for b in range(BROKERS)]
    owned: dict[str, list[tuple[int, str, _BundleSums]]] = {b: [] for b in brokers}
    names = namespaces(topics)
    onsets = hot_onsets(len(names), hot_namespaces, rounds)
    n = 0
    for k, ns in enumerate(names):
        count = min(TOPICS_PER_NAMESPACE, topics - k * TOPICS_PER_NAMESPACE)
        layout = NamespaceBundles.initial(ns, 4)
        for bundle, sums in zip(layout.bundles, _bundle_sums(layout, count), strict=True):
            owned[brokers[n % BROKERS]].append((k, bundle.key(ns), sums))
            n += 1
    cold_rate = sum(
        s.rate_in_by_residue[0] + s.rate_out for held in owned.values() for _, _, s in held
    )
    cpu_pct_per_msg = (CPU_COLD_PCT - CPU_IDLE_PCT) / max(1.0, cold_rate / BROKERS)
    fixed = {
        b: BrokerLoadReport(
            cluster="c1", broker=b, timestamp_ms=0, resources={},
            bundles=tuple(key for _, key, _ in held),
            msg_throughput_in=sum(s.throughput_in for _, _, s in held),
            msg_throughput_out=sum(s.throughput_out for _, _, s in held),
            num_topics=sum(s.topics for _, _, s in held), num_bundles=len(held),
            num_producers=sum(s.topics for _, _, s in held),
            num_consumers=2 * sum(s.topics for _, _, s in held),
        )
        for b, held in owned.items()
    }  # fmt: skip
    for r in range(rounds):
        at = START_MS + r * interval_s * 1000
        reports = []
        for b in brokers:
            rate_in = rate_out = 0.0
            for k, _, s in owned[b]:
                scale = HOT_FACTOR if k in onsets and r >= onsets[k] else 1.0
                rate_in += s.rate_in_by_residue[r % 7] * scale
                rate_out += s.rate_out * scale
            cpu = CPU_IDLE_PCT + (rate_in + rate_out) * cpu_pct_per_msg
            # the rest of the report is the same every round: only the rates and cpu change
            reports.append(
                dataclasses.replace(
                    fixed[b],
                    timestamp_ms=at,
                    msg_rate_in=rate_in,
                    msg_rate_out=rate_out,
                    resources={Resource.CPU: ResourceUsage(round(cpu, 3), 100.0)},
                )
            )
        yield RoundContext("c1", at, tuple(reports))


def _jvm_peak_rss_mib() -> float:
    """VmHWM of the JVMs this process started (Spark's driver JVM in local mode)."""
    peak = 0.0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) != os.getpid() or b"java" not in cmdline:
            continue
        hwm = fields.get("VmHWM", "0 kB").split()[0]
        peak = max(peak, int(hwm) / 1024)
    return peak


class Timed(PolicyWrapper[ReplayPolicy]):
    """A policy as the engine drives it, its observe and step times added up."""

    def __init__(self, policy: ReplayPolicy, phases: dict[str, float]) -> None:
        super().__init__(policy)
        self.phases = phases
        phases.setdefault(policy.name, 0.0)

    def observe(self, context: RoundContext) -> None:
        t0 = time.monotonic()
        self.policy.observe(context)
        self.phases["observe"] += time.monotonic() - t0

    def handle_at_ms(self, window_end_ms: int) -> int:
        return self.policy.handle_at_ms(window_end_ms)

    def step(self, window: ClosedWindow) -> tuple[list[ReplayAction], WindowSample]:
        t0 = time.monotonic()
        out = self.policy.step(window)
        self.phases[self.policy.name] += time.monotonic() - t0
        return out

    def close(self) -> None:
        self.policy.close()


class TimedOurs(Timed):
    """`ours`, timed, with where each window's bundle partials came from: the stage's closes
    or a partials job of its own. The stage rolls up the newest close with topics of each
    micro-batch (`streaming.stage.closing.BucketCloses`) with the layouts it was given, so
    `ours` should read the stage's partials of exactly the windows that were the newest of
    their batch and that the stage rolled up with the layouts `ours` handled them with."""

    def __init__(self, policy: OursPolicy, phases: dict[str, float]) -> None:
        super().__init__(policy, phases)
        self.ours = policy
        self.stage_partials_windows = 0  # windows whose partials `ours` read from the stage
        # windows with topics: (batch, end, the stage had the layouts `ours` handled it with)
        self._reported: list[tuple[int, int, bool]] = []

    def step(self, window: ClosedWindow) -> tuple[list[ReplayAction], WindowSample]:
        jobs_before = self.ours.processor.partials_jobs
        out = super().step(window)
        if window.topics:
            self.stage_partials_windows += self.ours.processor.partials_jobs == jobs_before
            # `BatchProcessor` keeps the layouts of the window it handled last: this one's.
            handled_with = self.ours.processor.stage_layouts
            same = window.stage_layouts is not None and window.stage_layouts == handled_with
            self._reported.append((window.batch_id, window.end_ms, same))
        return out

    @property
    def reported_windows(self) -> int:
        return len(self._reported)

    @property
    def stage_layouts_windows(self) -> int:
        """Windows the stage had `ours`' layouts for at that window."""
        return sum(same for _, _, same in self._reported)

    @property
    def stage_rolled_windows(self) -> int:
        """Of those, the newest window with topics of its batch: the stage rolled it up."""
        newest: dict[int, int] = {}
        for batch, end_ms, _ in self._reported:
            newest[batch] = max(end_ms, newest.get(batch, end_ms))
        return sum(same and newest[b] == end_ms for b, end_ms, same in self._reported)


class TimedShared(SharedWindows):
    """The Pulsar policies' shared window, the time to build it apart from their steps."""

    def __init__(self, phases: dict[str, float]) -> None:
        super().__init__()
        self.phases = phases

    def of(self, window: ClosedWindow) -> ReplayWindow:
        t0 = time.monotonic()
        built = super().of(window)
        self.phases["windows"] += time.monotonic() - t0
        return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=30, help="rounds (windows) recorded")
    parser.add_argument("--interval-s", type=int, default=60)
    parser.add_argument("--envelope", type=int, default=500)
    parser.add_argument(
        "--envelope-format",
        choices=ENVELOPE_FORMATS,
        default=DEFAULT_ENVELOPE_FORMAT,
        help=f"the envelopes recorded (collector.envelope_format; {DEFAULT_ENVELOPE_FORMAT})",
    )
    parser.add_argument(
        "--hot-namespaces", type=int, default=0,
        help=f"namespaces turning {HOT_FACTOR:g}x busier (over the default max_msg_rate) at "
        "onsets spread over the recording, so every policy acts along it (default 0: none)",
    )  # fmt: skip
    parser.add_argument("--records-per-batch", type=int, default=20_000)
    parser.add_argument(
        "--rounds-per-batch", type=int, default=1, help="markers per micro-batch (default 1)"
    )
    parser.add_argument(
        "--queued-windows", type=int,
        help="closed windows handed over ahead of the policies (default: --rounds-per-batch)",
    )  # fmt: skip
    parser.add_argument("--work-dir", type=Path, help="default: a temporary directory")
    parser.add_argument("--ours-only", action="store_true", help="not Pulsar's policies")
    parser.add_argument(
        "--stream-only", action="store_true",
        help="no policy: the stream's own share (the windows and the engine's count)",
    )  # fmt: skip
    parser.add_argument(
        "--pregenerate", action="store_true",
        help="generate the recording in memory before the clock starts: the writer beside "
        "the stream then only writes (a replay reads a recording; the generation is the "
        "bench's). Costs the recording's size in driver memory",
    )  # fmt: skip
    parser.add_argument(
        "--recording-dir", type=Path,
        help="the recording as `record` writes its stats (zstd Parquet), read back by the "
        "writer beside the stream as a replay of a directory reads it: written here first "
        "(before the clock) unless it holds this recording already (same --topics, --rounds, "
        "--interval-s, --envelope, --envelope-format), then reused",
    )  # fmt: skip
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE",
        help="an extra Spark setting (repeatable; for A/B runs and event logs)",
    )  # fmt: skip
    parser.add_argument(
        "--cluster-workers", type=int, default=0,
        help="start a standalone cluster of this many one-core workers for the run",
    )  # fmt: skip
    args = parser.parse_args()
    if args.cluster_workers:
        from bench.spark_cluster import spark_cluster

        with spark_cluster(workers=args.cluster_workers, cores=1, memory="2g") as cluster:
            args.master = cluster.master_url
            run(args)
    else:
        run(args)


def context_messages(
    topics: int, rounds: int, interval_s: int, hot_namespaces: int = 0
) -> Iterator[RecordedMessage]:
    """The context topic: `contexts`' rounds as the collector writes them, one a record."""
    for offset, context in enumerate(contexts(topics, rounds, interval_s, hot_namespaces)):
        yield RecordedMessage(
            0, offset, context.round_ms + 950, context_key(context.cluster),
            encode_context(context),
        )  # fmt: skip


def recording_on_disk(
    args: argparse.Namespace,
) -> tuple[Callable[[], Iterator[RecordedMessage]], Callable[[], Iterator[RoundContext]]]:
    """The bench's recording in `args.recording_dir` (`stats/` and `context/`, written now if
    not there), as readers of its files: what `DirRecording.stats_messages` and
    `DirRecording.contexts` read."""
    from balancer.app.replay.recording import ContextCounts, parse_contexts
    from balancer.app.replay.recording_dir import read_messages, write_messages

    what = {
        "topics": args.topics, "rounds": args.rounds, "interval_s": args.interval_s,
        "envelope": args.envelope, "envelope_format": args.envelope_format,
        "hot_namespaces": args.hot_namespaces,
        "load_reports": "the bundles' sums",  # a directory of an older bench's is refused
    }  # fmt: skip
    stats, context = args.recording_dir / "stats", args.recording_dir / "context"
    described = args.recording_dir / "bench-recording.json"
    if not described.exists():
        written = write_messages(
            stats, messages(args.topics, args.rounds, args.interval_s, args.envelope,
                            args.envelope_format, args.hot_namespaces),
        )  # fmt: skip
        context_written = write_messages(
            context,
            context_messages(args.topics, args.rounds, args.interval_s, args.hot_namespaces),
        )
        described.write_text(
            json.dumps({**what, "files": written.files, "context_files": context_written.files})
        )
    held = json.loads(described.read_text())
    if {k: held.get(k) for k in what} != what or "context_files" not in held:
        raise SystemExit(f"{args.recording_dir} holds another recording: {held}")
    files, context_files = list(held["files"]), list(held["context_files"])
    return (
        lambda: read_messages(stats, files),
        lambda: parse_contexts(read_messages(context, context_files), ContextCounts()),
    )


def run(args: argparse.Namespace) -> None:

    from balancer.app.stream_settings import stream_settings
    from streaming.spark.job import build_spark

    config = BalancerConfig.model_validate(
        {
            "clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:9"}],
            "spark": {
                "window_s": args.interval_s,
                "slide_s": args.interval_s,
                "master": args.master,
            },
            "collector": {"interval_s": args.interval_s},
        }
    )
    print(header("replay"))
    # before the clock
    on_disk, contexts_on_disk = recording_on_disk(args) if args.recording_dir else (None, None)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        work = args.work_dir or Path(tmp)
        settings_of_stream = stream_settings(config)
        extra = tuple((k, v) for k, v in (kv.split("=", 1) for kv in args.spark_conf))
        spark = build_spark(
            dataclasses.replace(
                settings_of_stream,
                extra_spark_conf=(*settings_of_stream.extra_spark_conf, *extra),
            )
        )
        spark.sparkContext.setLogLevel("ERROR")
        settings = WindowSettings(
            window_s=args.interval_s, slide_s=args.interval_s, watermark_s=args.interval_s,
            num_buckets=config.spark.num_buckets,
            shuffle_partitions=config.spark.shuffle_partitions,
            max_future_skew_s=config.spark.max_future_skew_s,
            records_per_batch=args.records_per_batch,
            markers_per_batch=args.rounds_per_batch,
            queued_windows=args.queued_windows or args.rounds_per_batch,
        )  # fmt: skip
        counts = StreamCounts()
        phases = dict.fromkeys(("stream", "decode", "windows", "observe"), 0.0)
        ours = OursPolicy(config, workdir=work / "ours")
        timed_ours = TimedOurs(ours, phases)
        policies: list[ReplayPolicy] = [] if args.stream_only else [timed_ours]
        if not (args.ours_only or args.stream_only):
            shared = TimedShared(phases)
            policies += [
                Timed(p, phases) for p in pulsar_replay_policies(PULSAR_POLICIES, config, shared)
            ]
        recorded = (
            list(messages(args.topics, args.rounds, args.interval_s, args.envelope,
                          args.envelope_format, args.hot_namespaces))
            if args.pregenerate else None
        )  # fmt: skip
        started = time.monotonic()
        generated = 0.0
        generated_cpu = 0.0  # in the writer's thread, where this runs

        def timed() -> Iterator[RecordedMessage]:
            nonlocal generated, generated_cpu
            it = (
                iter(recorded) if recorded is not None
                else on_disk() if on_disk is not None else messages(
                    args.topics, args.rounds, args.interval_s, args.envelope,
                    args.envelope_format, args.hot_namespaces,
                )
            )  # fmt: skip
            while True:
                t0, cpu0 = time.monotonic(), time.thread_time()
                message = next(it, None)
                generated += time.monotonic() - t0
                generated_cpu += time.thread_time() - cpu0
                if message is None:
                    return
                yield message

        first_window: list[float] = []
        batches_seen: dict[int, float] = {}  # batch -> when its first window came
        batch_samples: dict[int, int] = {}  # batch -> the samples of the windows it closed

        def windows() -> Iterator[ClosedWindow]:
            stream = stream_windows(
                spark, timed(), settings, work / "stream", counts,
                stage_layouts=(lambda: None) if args.stream_only else ours.stage_layouts,
            )  # fmt: skip
            while True:
                t0 = time.monotonic()
                window = next(stream, None)
                phases["stream"] += time.monotonic() - t0
                if window is None:
                    return
                if not first_window:
                    first_window.append(time.monotonic() - started)
                batches_seen.setdefault(window.batch_id, time.monotonic() - started)
                batch_samples[window.batch_id] = batch_samples.get(window.batch_id, 0) + (
                    window.topics
                )
                t0 = time.monotonic()
                window.topic_table()  # decoded once here, read by the engine and policies
                if not (args.ours_only or args.stream_only):  # Pulsar's: each topic once, sorted
                    window.topic_rows()
                phases["decode"] += time.monotonic() - t0
                yield window

        result = run_replay(
            source="bench", windows=windows(),
            contexts=contexts_on_disk() if contexts_on_disk is not None else contexts(
                args.topics, args.rounds, args.interval_s, args.hot_namespaces
            ),
            policies=policies, counts=counts, window_s=args.interval_s,
        )  # fmt: skip
        total_s = time.monotonic() - started
        jvm_rss_mib = _jvm_peak_rss_mib()
        spark.stop()
    samples = counts.samples
    windows_out = len(result.runs[0].windows) if result.runs else 0
    first_window_s = first_window[0] if first_window else total_s
    # The rate a long recording runs at, Spark's start and first batches left out. A batch
    # closes the windows whose rounds the batch before read (the watermark moves between
    # batches), so between the first windows of the second and of the last batch Spark
    # read exactly the rounds the fourth batch on closed.
    order = sorted(batches_seen, key=batches_seen.__getitem__)
    after_s = batches_seen[order[-1]] - batches_seen[order[1]] if len(order) >= 4 else 0.0
    steady_samples = sum(batch_samples[b] for b in order[3:]) if len(order) >= 4 else 0
    steady = steady_samples / after_s if after_s > 0 else 0.0
    figures = {
        "topics": args.topics,
        "rounds": args.rounds,
        "envelope_format": args.envelope_format,
        "hot_namespaces": args.hot_namespaces,
        "samples": samples,
        "windows": windows_out,
        "total_s": round(total_s, 1),
        # The writer thread's time (the recording's generation included), beside the stream:
        # the first window waits only for the first run's files.
        "write_files_s": round(counts.write_s, 1),
        "write_files_cpu_s": round(counts.write_cpu_s, 1),  # the writer thread's CPU
        "write_files_cpu_s_per_round": round(counts.write_cpu_s / max(1, args.rounds), 3),
        "first_window_s": round(first_window_s, 1),
        "batches": counts.batches,
        "files": counts.files,
        "query_runs": counts.runs,  # chained AvailableNow runs (each a start and a state load)
        # With --recording-dir: reading the recording's files (a replay's own cost, kept in
        # the day's writing); otherwise the bench's generation (left out of it).
        "generation_s": round(generated, 1) if on_disk is None else 0.0,
        "generation_cpu_s": round(generated_cpu, 1) if on_disk is None else 0.0,
        "read_recording_s": round(generated, 1) if on_disk is not None else 0.0,
        "read_recording_cpu_s": round(generated_cpu, 1) if on_disk is not None else 0.0,
        "samples_per_s": round(samples / total_s) if total_s else 0,
        "steady_s": round(after_s, 1),  # the second batch's first window to the last's
        "steady_samples": steady_samples,
        "steady_samples_per_s": round(steady),
        "driver_peak_rss_mib": round(_vm_hwm_mib()),
        "jvm_peak_rss_mib": round(jvm_rss_mib),
        "actions": {r.policy: len(r.actions) for r in result.runs},
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "ours_partials_jobs": ours.processor.partials_jobs,  # 0 with --stream-only
        # windows with topics `ours` handled; of those, whose partials it read from the
        # stage's closes; the stage had the layouts `ours` handled them with; and of these,
        # the newest of their batch (the close the stage rolls up)
        "ours_reported_windows": timed_ours.reported_windows,
        "ours_stage_partials_windows": timed_ours.stage_partials_windows,
        "ours_stage_layouts_windows": timed_ours.stage_layouts_windows,
        "ours_stage_rolled_windows": timed_ours.stage_rolled_windows,
        "master": args.master,
        "pregenerated": args.pregenerate,
        "recording_dir": str(args.recording_dir) if args.recording_dir else None,
    }
    for key, value in figures.items():
        print(f"{key}: {json.dumps(value)}")
    target_s = total_s * (144_000_000 / samples) if samples else None
    print(f"at this rate, 144M samples: {target_s:,.0f} s" if target_s else "no samples")
    if steady:
        # A day's files are written beside the stream (a thread), not before it, but on the
        # same cores: a day's writing (this recording's writing CPU a round) is counted as CPU
        # the stream's cores share, over and above the steady rate measured (this
        # recording's writing ends early in it). The first window waits for the first
        # run's files only, as a day's would.
        day_rounds = 144_000_000 // max(1, args.topics)
        # The recording's generation left out: a replay reads a recording instead (with
        # --recording-dir that reading is measured, and kept); the generation's CPU still
        # slowed this run's stream.
        writing_cpu_s = max(0.0, counts.write_cpu_s - (generated_cpu if on_disk is None else 0))
        day_write_s = writing_cpu_s / max(1, args.rounds) * day_rounds
        cores = os.cpu_count() or 1
        day_s = first_window_s + 144_000_000 / steady + day_write_s / cores
        print(f"a day's writing ({day_rounds:,} rounds): {day_write_s:,.0f} CPU s, beside")
        print(
            f"first window, then the steady rate, a day's writing shared by {cores} cores, "
            f"144M samples: {day_s:,.0f} s"
        )
    figures["rounds_per_batch"] = args.rounds_per_batch
    figures["queued_windows"] = settings.queued_windows
    print_result({"bench": "replay", "machine": machine().__dict__, **figures})


if __name__ == "__main__":
    main()
