"""Benchmark: the replay's micro-batch files by Parquet codec (issue 44).

Writes `bench.replay`'s recording (`--topics` x `--rounds`, envelopes of `--envelope`
events, Arrow unless `--envelope-format json`) as the replay writes it
(`balancer.app.replay.batch_files.write_batches`, `--rounds-per-batch` rounds a file) with
each codec, then reads every file's values in a local Spark (`local[2]`). Prints, a round:
the writer thread's CPU (the driver's cost), the JVM's CPU for the read (Spark's task time,
decompression included), their sum, and the files' size. Every codec is measured
`--repeats` times in turn (the first pass warms the JVM: read the last).

    python -m bench.replay_codecs --topics 100000 --rounds 12
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import get_args

from balancer.app.replay.batch_files import Compression, write_batches
from balancer.core.envelopes import ENVELOPE_FORMATS
from bench.common import header, print_result
from bench.replay import messages


def _jvm_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--envelope", type=int, default=500)
    parser.add_argument("--envelope-format", choices=ENVELOPE_FORMATS, default="arrow")
    parser.add_argument("--rounds-per-batch", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    print(header("replay_codecs"))
    recorded = list(messages(args.topics, args.rounds, 60, args.envelope, args.envelope_format))
    largest = max(len(m.value) for m in recorded)
    print(f"{len(recorded):,} messages, the largest value {largest:,} bytes")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.parquet.columnarReaderBatchSize", str(max(1, (32 << 20) // largest)))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = int(jvm.ProcessHandle.current().pid())
    figures: dict[str, dict[str, float]] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-codecs-"))
    try:
        for repeat in range(args.repeats):
            for codec in get_args(Compression):
                directory = work / f"{codec}-{repeat}"
                cpu0 = time.thread_time()
                write_batches(
                    recorded, directory, records_per_batch=10**9,
                    markers_per_batch=args.rounds_per_batch, compression=codec,
                )  # fmt: skip
                write_cpu_s = time.thread_time() - cpu0
                size = sum(p.stat().st_size for p in directory.iterdir())
                jvm0 = _jvm_cpu_s(pid)
                spark.read.parquet(str(directory)).selectExpr("sum(length(value))").collect()
                read_cpu_s = _jvm_cpu_s(pid) - jvm0
                figures[codec] = {
                    "write_cpu_s_per_round": round(write_cpu_s / args.rounds, 3),
                    "read_cpu_s_per_round": round(read_cpu_s / args.rounds, 3),
                    "cpu_s_per_round": round((write_cpu_s + read_cpu_s) / args.rounds, 3),
                    "mib": round(size / 2**20, 1),
                }
                print(f"pass {repeat + 1} {codec}: {figures[codec]}", flush=True)
                shutil.rmtree(directory)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print_result(
        {"bench": "replay_codecs", "topics": args.topics, "rounds": args.rounds,
         "envelope_format": args.envelope_format, "codecs": figures}
    )  # fmt: skip


if __name__ == "__main__":
    main()
