"""One read task of the Kafka source on its own: records/s against raw kafka-python.

    .venv/bin/python -m bench.read_task [--events 400000] [--topics 10000] [--repeat 3]
        [--envelope 0] [--envelope-format arrow|json] [--cold]

Produces N events (bench.pipeline's), one per message (JSON) or `--envelope` per message (an
Arrow envelope unless `--envelope-format json`), to a fresh
one-partition topic on an embedded tansu broker (or `--bootstrap`), then times, in one
process and one at a time:
1. raw: every record read once with kafka-python, nothing else (bench.pipeline's raw side);
2. read task, parsed: `streaming.read.source`'s read task over the whole partition with the
   job's defaults (4 PIP-157 buckets, 60 s panes), to its last Arrow batch and summary;
3. read task, raw (`raw=true`): records to Arrow batches, no parsing.
Each read task runs `--repeat` times; the best run counts (the first pays for imports and
the names it has seen, which a Spark worker keeps between micro-batches); with `--cold`
each run starts with none seen, as at 10M topics, where a read task meets most names for
the first time. No Spark: this isolates what a read task costs per record, the part of the
job `bench.pipeline` cannot separate.

The last two lines are `RESULT <json>` and `task_records_per_s=<N> raw_records_per_s=<M>`.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence
from typing import Any

from bench.common import add_compression_argument, machine, print_result
from bench.pipeline import (
    SPARK,
    add_envelope_format_argument,
    broker,
    consume_raw,
    parse_args,
    produce,
)
from streaming.read.parse import clear_topic_cache
from streaming.read.source import KafkaRange, KafkaStatsStreamReader, SourceOptions


def parse_own_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.read_task", description=__doc__)
    p.add_argument("--events", type=int, default=400_000, help="events produced")
    p.add_argument("--topics", type=int, default=10_000, help="distinct topics")
    p.add_argument("--repeat", type=int, default=3, help="runs of each read task")
    p.add_argument("--envelope", type=int, default=0, help="events per Kafka message (0: one each)")
    add_envelope_format_argument(p)
    add_compression_argument(p)
    p.add_argument(
        "--cold", action="store_true", help="each parsed run starts with no topic name seen"
    )
    p.add_argument("--bootstrap", help="an existing Kafka (default: embedded tansu)")
    return p.parse_args(argv)


def _stream_options() -> dict[str, Any]:
    """The stream's settings a read task takes: the config's defaults, as `run` passes them
    (the task reads a given range: no limit per trigger)."""
    return {
        "num_buckets": SPARK.num_buckets,
        "pane_ms": SPARK.slide_s * 1000,
        "max_future_skew_ms": SPARK.max_future_skew_s * 1000,
        "max_offsets_per_trigger": None,
    }


def time_task(
    options: SourceOptions, task: KafkaRange, repeat: int, *, cold: bool = False
) -> tuple[float, int, list[float]]:
    """Best seconds of `repeat` runs of the read task, the rows of the last, and each run's
    CPU seconds (the process's: what A/B runs on a shared machine compare)."""
    best_s, rows, cpu_s = float("inf"), 0, []
    for _ in range(repeat):
        if cold:
            clear_topic_cache()
        started, started_cpu = time.perf_counter(), time.process_time()
        rows = sum(b.num_rows for b in KafkaStatsStreamReader(options).read(task))
        best_s = min(best_s, time.perf_counter() - started)
        cpu_s.append(time.process_time() - started_cpu)
    return best_s, rows, cpu_s


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_own_args(argv)
    print(f"machine: {machine().describe()}")
    produce_args = parse_args(
        ["--events", str(args.events), "--topics", str(args.topics), "--partitions", "1",
         "--envelope", str(args.envelope), "--envelope-format", args.envelope_format,
         "--compression", args.compression,
         "--no-close-windows"]
    )  # fmt: skip
    envelope_format = produce_args.envelope_format  # JSON when one event per message
    with broker(args.bootstrap) as bootstrap:
        topic = f"bench-read-task-{uuid.uuid4().hex[:8]}"
        messages, produce_s = produce(bootstrap, topic, produce_args)
        print(f"produced {args.events} events in {messages} messages in {produce_s:.1f} s")
        raw_s = consume_raw(bootstrap, topic, messages)
        task = KafkaRange(0, 0, messages)
        parsed = SourceOptions(bootstrap, topic, **_stream_options())
        parsed_s, parsed_rows, parsed_cpu_s = time_task(parsed, task, args.repeat, cold=args.cold)
        raw = SourceOptions(bootstrap, topic, raw=True, **_stream_options())
        raw_task_s, _, _ = time_task(raw, task, args.repeat)
    rates = {
        "task_events_per_s": args.events / parsed_s,
        "raw_records_per_s": messages / raw_s,
        "task_records_per_s": messages / parsed_s,
        "raw_task_records_per_s": messages / raw_task_s,
    }
    print(f"raw kafka-python: {raw_s:.2f} s, {rates['raw_records_per_s']:,.0f} records/s")
    print(
        f"read task, parsed{' (cold)' if args.cold else ''}: {parsed_s:.2f} s, "
        f"{rates['task_records_per_s']:,.0f} records/s, "
        f"{rates['task_events_per_s']:,.0f} events/s ({parsed_rows} rows: packs and the summary)"
    )
    # The first run pays for imports and for the names it has not seen (unless --cold).
    warm_cpu_s = sorted(parsed_cpu_s[1:] or parsed_cpu_s)
    median_cpu_s = warm_cpu_s[len(warm_cpu_s) // 2]
    print(
        f"read task, parsed: CPU s per run {', '.join(f'{s:.2f}' for s in parsed_cpu_s)}; "
        f"median after the first {median_cpu_s:.2f} s, {1e6 * median_cpu_s / args.events:.2f} us "
        "an event"
    )
    print(f"read task, raw: {raw_task_s:.2f} s, {rates['raw_task_records_per_s']:,.0f} records/s")
    print_result(
        {
            "events": args.events,
            "topics": args.topics,
            "messages": messages,
            "envelope": args.envelope,
            "envelope_format": envelope_format,
            "cold": args.cold,
            "compression": args.compression,
            **{k: round(v) for k, v in rates.items()},
            "task_cpu_s": [round(s, 3) for s in parsed_cpu_s],
            "task_cpu_s_median": round(median_cpu_s, 3),
        }
    )
    print(
        f"task_records_per_s={rates['task_records_per_s']:.0f} "
        f"raw_records_per_s={rates['raw_records_per_s']:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
