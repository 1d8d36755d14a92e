"""Run the streaming job on its own, writing each `BatchReport` as a JSON line.

    python -m streaming.spark.standalone --bootstrap 127.0.0.1:9092 --topic pulsar-topic-stats \
        --checkpoint /tmp/ckpt --reports /tmp/reports.jsonl \
        --window-s 120 --slide-s 60 --watermark-s 60 --trigger-interval-s 30 \
        --max-offsets-per-trigger 200000 --max-future-skew-s 600 \
        --master 'local[2]' --num-buckets 4 --shuffle-partitions 2 [--available-now]

For dry runs, debugging and the crash/restart test: the layouts are Pulsar's initial 4
bundles per namespace (no admin API), the handler only records. The balancer itself wires
the job to the controller (`pulsar-balancer run`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from balancer.core.report import StaticLayouts
from streaming.driver.jsonl_reports import JsonlReportHandler
from streaming.spark.errors import root_cause
from streaming.spark.job import StreamSettings, build_spark, dead_letter_sink, start_stream


def _limit(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m streaming.spark.standalone", description=__doc__)
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    p.add_argument("--topic", required=True, help="Kafka topic of the stats events")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--reports", required=True, type=Path, help="JSON-lines file of reports")
    p.add_argument("--dead-letter-dir", help="dead letters to files (default: a Kafka topic)")
    p.add_argument("--dead-letter-topic", help="dead-letter topic (default: <topic>-dead-letters)")
    p.add_argument("--starting-offsets", choices=("earliest", "latest"), default="earliest")
    # Required: the stream's defaults live in the balancer's config only (spark.*).
    p.add_argument("--window-s", type=int, required=True, help="window length (config: 120)")
    p.add_argument("--slide-s", type=int, required=True, help="window slide (config: 60)")
    p.add_argument("--watermark-s", type=int, required=True, help="lateness (config: 60)")
    p.add_argument(
        "--trigger-interval-s", type=float, required=True, help="micro-batch interval (config: 30)"
    )
    p.add_argument(
        "--max-offsets-per-trigger", type=_limit, required=True,
        help="records per micro-batch, or 'none' (config: 200000)",
    )  # fmt: skip
    p.add_argument(
        "--max-future-skew-s", type=int, required=True,
        help="events stamped further ahead are dead-lettered (config: 600)",
    )  # fmt: skip
    p.add_argument("--master", required=True, help="Spark master (config: local[2])")
    p.add_argument("--num-buckets", type=int, required=True, help="PIP-157 buckets (config: 4)")
    p.add_argument(
        "--shuffle-partitions", type=int, required=True, help="state partitions (config: 2)"
    )
    p.add_argument(
        "--jvm-options", required=True,
        help="the JVMs' options, '' for none (config: -XX:TieredStopAtLevel=1)",
    )  # fmt: skip
    p.add_argument("--topics-for-all", action="store_true", help="reports carry every topic")
    p.add_argument("--available-now", action="store_true", help="process what is there, stop")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings = StreamSettings(
        bootstrap_servers=args.bootstrap,
        topic=args.topic,
        checkpoint_dir=args.checkpoint,
        dead_letter_dir=args.dead_letter_dir,
        dead_letter_topic=args.dead_letter_topic,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        window_s=args.window_s,
        slide_s=args.slide_s,
        watermark_s=args.watermark_s,
        trigger_interval_s=args.trigger_interval_s,
        spark_master=args.master,
        num_buckets=args.num_buckets,
        shuffle_partitions=args.shuffle_partitions,
        jvm_options=args.jvm_options,
        max_future_skew_s=args.max_future_skew_s,
    )
    spark = build_spark(settings)
    spark.sparkContext.setLogLevel("WARN")
    handler = JsonlReportHandler(args.reports, topics_for_all=args.topics_for_all)
    dead_letters = dead_letter_sink(settings)
    query = start_stream(
        spark,
        settings,
        handler,
        StaticLayouts(),
        available_now=args.available_now,
        dead_letters=dead_letters,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        query.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    dead_letters.close()  # bounded (balancer.kafka.clients)
    if error is not None:
        print(f"error: stream failed: {root_cause(str(error))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
