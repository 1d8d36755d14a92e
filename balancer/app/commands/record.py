"""`pulsar-balancer record --to DIR [--since T] [--until T] [--config FILE]`: export a
recording (the stats topic and the context topic) to a directory a replay reads.

    pulsar-balancer record --config conf/balancer.yaml --to rec-2026-11-23 \\
        --since 2026-11-23T00:00:00Z --until 2026-11-30T00:00:00Z

The records of both topics stamped since <= t < until (T: ISO-8601, a naive time is UTC,
or epoch milliseconds; either may be left out), as Kafka holds them, in Parquet files with
a `manifest.json` (balancer.app.replay.recording_dir). The directory is written beside DIR
under a temporary name and renamed into place when complete, so DIR is either the whole
recording or absent; a DIR that exists and is not empty is refused. Kafka comes from
`--config` (kafka.bootstrap_servers, stats_topic, context_topic, security) or from the
flags. Exit 0 when recorded; 2 with one `error:` line otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from balancer.app.config import load_config
from balancer.app.kafka_config import KafkaConfig
from balancer.app.replay.recording import (
    ContextCounts,
    ContextParser,
    KafkaRecording,
    kafka_recording,
)
from balancer.app.replay.recording_dir import (
    CONTEXT_DIR,
    FORMAT,
    FORMAT_VERSION,
    ORDER,
    STATS_DIR,
    Manifest,
    TopicManifest,
    topic_manifest,
    write_manifest,
    write_messages,
)
from balancer.core.replay.recording import RecordedMessage

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "record"
_DEFAULTS = KafkaConfig()


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="export the stats and context topics (a time range) to a directory for replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--to", type=Path, required=True, metavar="DIR", help="new directory")
    parser.add_argument("--since", metavar="T", help="first record time (ISO-8601 or epoch ms)")
    parser.add_argument("--until", metavar="T", help="end, excluded (ISO-8601 or epoch ms)")
    parser.add_argument("--config", type=Path, help="balancer YAML config: its kafka section")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (without --config)")
    parser.add_argument("--stats-topic", help=f"default: {_DEFAULTS.stats_topic}")
    parser.add_argument("--context-topic", help=f"default: {_DEFAULTS.context_topic}")
    parser.set_defaults(handler=run)


def parse_time(text: str, flag: str) -> int:
    """Epoch milliseconds of `text`: digits are epoch ms; else ISO-8601 (naive: UTC)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{flag} {text!r}: give an ISO-8601 time (2026-11-23T00:00:00Z) or epoch ms"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    since_ms = None if args.since is None else parse_time(args.since, "--since")
    until_ms = None if args.until is None else parse_time(args.until, "--until")
    check_target(args.to)
    recording = _recording(args, since_ms, until_ms)
    try:
        manifest = record_to(recording, args.to, created_ms=int(time.time() * 1000))
    except KafkaError as exc:  # unreachable, refused: one line (texts carry no secrets)
        raise ValueError(f"Kafka: {type(exc).__name__}: {str(exc)[:200]}") from None
    stats, context = manifest["stats"], manifest["context"]
    print(
        f"recorded {stats['messages']} stats messages of {stats['topic']} "
        f"({len(stats['partitions'])} partitions, {_span(stats)}) to {args.to}"
    )
    counts = ContextCounts(
        given=manifest["contexts_read"], rejected=Counter(manifest["contexts_rejected"])
    )
    print(f"{context['topic']}: {counts.describe()}")
    return 0


def _recording(
    args: argparse.Namespace, since_ms: int | None, until_ms: int | None
) -> KafkaRecording:
    if args.config is not None:
        config = load_config(args.config)
        recording = kafka_recording(config, since_ms=since_ms, until_ms=until_ms)
        if args.bootstrap is not None:
            raise ValueError("give --config or --bootstrap, not both")
    else:
        recording = KafkaRecording(
            bootstrap_servers=args.bootstrap or ",".join(_DEFAULTS.bootstrap_servers),
            stats_topic=_DEFAULTS.stats_topic,
            context_topic=_DEFAULTS.context_topic,
            since_ms=since_ms,
            until_ms=until_ms,
        )
    if args.stats_topic:
        recording.stats_topic = args.stats_topic
    if args.context_topic:
        recording.context_topic = args.context_topic
    if recording.stats_topic == recording.context_topic:
        raise ValueError("the stats and context topics must differ")
    return recording


def check_target(target: Path) -> None:
    """Refuse a target that exists and is not an empty directory (ValueError)."""
    if not target.exists():
        return
    if not target.is_dir():
        raise ValueError(f"--to {target}: exists and is not a directory")
    if any(target.iterdir()):
        raise ValueError(f"--to {target}: the directory is not empty (never overwritten)")


def record_to(recording: KafkaRecording, target: Path, *, created_ms: int) -> Manifest:
    """Write the recording to `target` (a temporary directory beside it, renamed into place
    when complete); returns its manifest. Nothing is left behind on failure."""
    check_target(target)
    parent = target.absolute().parent
    made_parent = not parent.exists()
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.recording-", dir=parent))
    try:
        # The ranges are found first: the offsets the manifest names are those read.
        stats_ranges = recording.ranges(recording.stats_topic)
        context_ranges = recording.ranges(recording.context_topic)
        stats = write_messages(work / STATS_DIR, recording.stats_messages())
        counts = ContextCounts()
        checked = _checked(recording.raw_contexts(), ContextParser(counts))
        context = write_messages(work / CONTEXT_DIR, checked)
        manifest: Manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tool_version": _tool_version(),
            "created_ms": created_ms,
            "since_ms": recording.since_ms,
            "until_ms": recording.until_ms,
            "order": ORDER,
            "stats": topic_manifest(
                recording.stats_topic, {r.partition: (r.start, r.end) for r in stats_ranges}, stats
            ),
            "context": topic_manifest(
                recording.context_topic,
                {r.partition: (r.start, r.end) for r in context_ranges},
                context,
            ),
            "contexts_read": counts.given,
            "contexts_rejected": dict(sorted(counts.rejected.items())),
        }
        for kind, names in ((STATS_DIR, stats.files), (CONTEXT_DIR, context.files)):
            for name in names:
                _fsync(work / kind / name)
        write_manifest(work, manifest)
        check_target(target)  # still free: nothing else wrote it meanwhile
        # rename(2) replaces an empty directory, and only an empty one.
        os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        if made_parent:
            shutil.rmtree(parent, ignore_errors=True)
        raise
    return manifest


def _checked(
    messages: Iterable[RecordedMessage], parser: ContextParser
) -> Iterator[RecordedMessage]:
    """Every record as it is (bad ones too: a replay counts them as reading Kafka would),
    each parsed on the way so the manifest says how many a replay will skip."""
    for message in messages:
        parser.take(message)
        yield message


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _tool_version() -> str:
    try:
        return importlib.metadata.version("pulsar-balancer")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _span(topic: TopicManifest) -> str:
    first, last = topic["first_timestamp_ms"], topic["last_timestamp_ms"]
    if first is None or last is None:
        return "none in the range"
    return f"{_iso(first)} .. {_iso(last)}"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
