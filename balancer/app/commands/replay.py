"""`pulsar-balancer replay DIR | --from-kafka`: a recording through our policy and Pulsar's.

    pulsar-balancer replay recordings/monday --config conf/balancer.yaml --html report.html
    pulsar-balancer replay --from-kafka --config conf/balancer.yaml --since 2026-11-23T00:00Z

The recording (a directory written by `record`, or the stats and context topics themselves)
runs through the stream's own code in batch (Spark: the windows `run` would have closed),
then, window by window, through each policy on its own simulated layout: `ours` (the
balancer's own decision code, with the settings of `--config`) and Pulsar's load managers.
Prints the report (text, or `--output json`); `--html FILE` writes the timeline page.
Exit 0, or 2 with one line on stderr for a bad recording, config or argument.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from balancer.app.commands.output import add_output_argument, positive_int, wants_json
from balancer.app.config import BalancerConfig, load_config
from balancer.app.replay.engine import ReplayPolicy, run_replay
from balancer.app.replay.ours import OursPolicy
from balancer.app.replay.windows import StreamCounts, WindowSettings, stream_windows
from balancer.core.replay.recording import Recording
from balancer.core.replay.result import POLICY_OURS, ReplayResult

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

log = logging.getLogger(__name__)

NAME = "replay"
# Rounds a micro-batch: one, the batch `run` reads when it keeps up. More is faster (Spark pays
# a few seconds per batch whatever its size; the driver holds up to two batches' closed rows:
# at 20,000 topics its peak RSS was 313 MiB at 6, 440 at 12), but a sample that arrives after
# its window's marker in the same batch is not late there (Spark's watermark moves between
# batches), where `run` keeping up drops it: tests/app/replay/test_replay_dir.py.
DEFAULT_ROUNDS_PER_BATCH = 1
# The cluster a config needs when none is given (a recording names its own clusters).
_NO_CLUSTER = {"name": "replay", "admin_url": "http://127.0.0.1:9"}


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="replay a recording (record DIR, or the Kafka topics) through our policy and "
        "Pulsar's; report splits, moves and overloads per policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("dir", nargs="?", type=Path, help="a directory written by `record`")
    source.add_argument(
        "--from-kafka",
        action="store_true",
        help="read the config's stats and context topics (kafka.stats_topic, context_topic)",
    )
    parser.add_argument(
        "--since", help="--from-kafka: from this time (ISO 8601, UTC unless it says; or epoch ms)"
    )
    parser.add_argument("--until", help="--from-kafka: up to this time (the same forms)")
    parser.add_argument(
        "--config",
        type=Path,
        help="balancer YAML config: ours' settings, the stream's windows, Kafka",
    )
    parser.add_argument(
        "--policies",
        default=",".join(available_policies()),
        help=f"comma-separated (default all: {', '.join(available_policies())})",
    )
    parser.add_argument("--html", type=Path, metavar="FILE", help="write the timeline page here")
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="where the replay keeps its micro-batch files and state (default: a temporary "
        "directory, removed after); needs about the recording's size",
    )
    parser.add_argument(
        "--rounds-per-batch",
        type=positive_int,
        default=DEFAULT_ROUNDS_PER_BATCH,
        help="collector rounds (round markers) per micro-batch, and windows queued for the "
        f"policies (default {DEFAULT_ROUNDS_PER_BATCH}, the batch run reads when it keeps up; "
        "more is faster, as Spark's fixed cost is paid per batch, but a sample arriving after "
        "its window's marker in the same batch is not dropped as late: "
        "docs/operations.md#replay)",
    )
    add_output_argument(parser)
    parser.set_defaults(handler=run)


def available_policies() -> tuple[str, ...]:
    from balancer.app.replay.pulsar_policies import PULSAR_POLICIES

    return (POLICY_OURS, *PULSAR_POLICIES)


def chosen_policies(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    known = available_policies()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(
            f"--policies: unknown {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(known)}"
        )
    return names


def replay_config(path: Path | None) -> BalancerConfig:
    if path is None:
        return BalancerConfig.model_validate({"clusters": [_NO_CLUSTER]})
    return load_config(path)


def window_settings(
    config: BalancerConfig, rounds_per_batch: int = DEFAULT_ROUNDS_PER_BATCH
) -> WindowSettings:
    spark = config.spark
    return WindowSettings(
        window_s=spark.window_s,
        slide_s=spark.slide_s,
        watermark_s=spark.watermark_s,
        num_buckets=spark.num_buckets,
        shuffle_partitions=spark.shuffle_partitions,
        max_future_skew_s=spark.max_future_skew_s,
        markers_per_batch=rounds_per_batch,
        queued_windows=rounds_per_batch,  # Spark runs the next batch as the policies work
    )


def open_recording(args: argparse.Namespace, config: BalancerConfig) -> Recording:
    if not args.from_kafka:
        if args.since is not None or args.until is not None:
            raise ValueError("--since/--until go with --from-kafka (a directory is its range)")
        if not args.dir.is_dir():
            raise ValueError(f"{args.dir}: no such recording directory")
    from balancer.app.commands.record import parse_time
    from balancer.app.replay.recording import DirRecording, kafka_recording

    if args.from_kafka:
        since_ms = None if args.since is None else parse_time(args.since, "--since")
        until_ms = None if args.until is None else parse_time(args.until, "--until")
        return kafka_recording(config, since_ms=since_ms, until_ms=until_ms)
    return DirRecording(args.dir)


@contextmanager
def work_dir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="pulsar-balancer-replay-") as tmp:
        yield Path(tmp)


def make_policies(
    names: tuple[str, ...], config: BalancerConfig, work: Path, settings_from: str
) -> list[ReplayPolicy]:
    from balancer.app.replay.pulsar_policies import pulsar_replay_policies

    out: list[ReplayPolicy] = []
    if POLICY_OURS in names:
        out.append(OursPolicy(config, workdir=work / "ours", settings_from=settings_from))
    out.extend(pulsar_replay_policies([n for n in names if n != POLICY_OURS], config))
    return out


def replay(
    recording: Recording,
    config: BalancerConfig,
    names: tuple[str, ...],
    work: Path,
    settings_from: str = "the default",
    rounds_per_batch: int = DEFAULT_ROUNDS_PER_BATCH,
) -> ReplayResult:
    """The replay of `recording` through the named policies (Spark started here)."""
    from balancer.app.stream_settings import stream_settings
    from streaming.spark.job import build_spark

    settings = replace(
        stream_settings(config),
        app_name="pulsar-balancer-replay",
        checkpoint_dir=str(work / "checkpoint"),
    )
    spark = build_spark(settings)
    counts = StreamCounts()
    policies = make_policies(names, config, work, settings_from)
    ours = next((p for p in policies if isinstance(p, OursPolicy)), None)
    windows = stream_windows(
        spark,
        recording.stats_messages(),
        window_settings(config, rounds_per_batch),
        work / "stream",
        counts,
        stage_layouts=ours.stage_layouts if ours is not None else None,
    )
    return run_replay(
        source=recording.description,
        windows=windows,
        contexts=recording.contexts(),
        policies=policies,
        counts=counts,
        window_s=config.spark.window_s,
    )


def run(args: argparse.Namespace) -> int:
    config = replay_config(args.config)
    names = chosen_policies(args.policies)
    recording = open_recording(args, config)
    from kafka.errors import KafkaError
    from pyspark.errors import PySparkException

    from balancer.ops.replay_report import render_text, to_json, write_html
    from streaming.spark.errors import root_cause

    with work_dir(args.work_dir) as work:
        settings_from = "the default" if args.config is None else f"{args.config}'s"
        try:
            result = replay(recording, config, names, work, settings_from, args.rounds_per_batch)
        except KafkaError as exc:  # one line, exit 2 (the CLI's bad-input rule)
            raise ValueError(f"Kafka: {exc}") from None
        except PySparkException as exc:  # the job's root cause, in one line
            raise ValueError(f"the replay's Spark job failed: {root_cause(str(exc))}") from None
    if args.html is not None:
        write_html(result, args.html)
    sys.stdout.write(to_json(result) + "\n" if wants_json(args) else render_text(result))
    return 0
