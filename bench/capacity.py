"""Capacity on a Spark standalone cluster: the pipeline benchmark on 1 worker, then on 2.

    .venv/bin/python -m bench.capacity [--workers 1 2] [--events 32000000] [--topics 500000]
        [--max-offsets-per-trigger 5000] [--warmup-s 120] [--no-pin-cpus]

For each worker count W it starts a standalone master and W workers of one core each
(`bench/spark_cluster.py`, on 127.0.0.1, stopped by PID), runs `bench.pipeline --master
spark://...` in a child process on the same data (same generator, same sizes), and reads its
steady rate once warm (window closes counted; `bench.pipeline --warmup-s`; a run that ends
within the warm-up is an error, not a rate: its rate would include the JIT's first minutes
and understate that worker count against a longer run). It prints a
table and the speedup of the largest worker count over the smallest; the target from 1 to 2
workers is >= 1.7x (docs/benchmarks.md#capacity-on-a-standalone-cluster).

Each worker, with its executor and Python workers, is pinned to a CPU of its own, as an
executor pod with a 1-CPU limit is confined: Spark's one core is only a task slot, and
unpinned a worker's executor threads and Python workers may run on any core. The driver and
the broker stay unpinned and share the cores with the workers, so on a 2-core machine the figure
is a lower bound of what separate machines give.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import header, markdown_table, print_result
from bench.scale import RESULT_LINE
from bench.spark_cluster import spark_cluster

TARGET_SPEEDUP = 1.7  # 1 -> 2 workers of one core each


@dataclass
class CapacityRun:
    workers: int
    events_per_s: float | None
    close_batch_s: float | None
    wall_s: float
    error: str | None = None


def run_on_cluster(
    workers: int, pipeline_args: Sequence[str], timeout_s: float, *, pin_cpus: bool
) -> CapacityRun:
    started = time.monotonic()
    with spark_cluster(workers=workers, cores=1, memory="2g", pin_cpus=pin_cpus) as cluster:
        done = subprocess.run(
            [sys.executable, "-m", "bench.pipeline", "--master", cluster.master_url,
             *pipeline_args],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    wall_s = time.monotonic() - started
    found = [m for line in done.stdout.splitlines() if (m := RESULT_LINE.match(line.strip()))]
    if done.returncode != 0 or not found:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        return CapacityRun(workers, None, None, wall_s, f"exit {done.returncode}: {tail[:300]}")
    return capacity_run(workers, json.loads(found[-1]["json"]), wall_s)


def capacity_run(workers: int, result: dict[str, Any], wall_s: float) -> CapacityRun:
    """The run of `bench.pipeline`'s RESULT: its warm rate, or an error when no batch came
    after the warm-up (its rate would include the JIT's first minutes and, against a longer
    run's warm rate, understate that worker count)."""
    if not result["warmed_up"]:
        return CapacityRun(
            workers, None, None, wall_s, "no batch after the warm-up: raise --events"
        )
    return CapacityRun(workers, float(result["events_per_s"]), result["close_batch_s"], wall_s)


def speedup(runs: Sequence[CapacityRun]) -> float | None:
    """The steady rate of the most workers over that of the fewest (None: a run failed)."""
    ordered = sorted(runs, key=lambda r: r.workers)
    first, last = ordered[0].events_per_s, ordered[-1].events_per_s
    if not first or not last or len(ordered) < 2:
        return None
    return last / first


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.capacity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    # Enough for the fastest run to go on well past the warm-up (2 workers: ~170,000 events/s).
    p.add_argument("--events", type=int, default=32_000_000)
    p.add_argument("--topics", type=int, default=500_000)
    p.add_argument("--envelope", type=int, default=100, help="events per Kafka message")
    p.add_argument("--max-offsets-per-trigger", type=int, default=5_000)
    p.add_argument(
        "--warmup-s",
        type=float,
        default=120.0,
        help="batches starting within this many seconds of the first are left out (JIT)",
    )
    p.add_argument("--timeout-s", type=float, default=1800.0, help="per pipeline run")
    p.add_argument(
        "--pin-cpus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="confine each worker (its executor and Python workers) to one CPU, as a pod "
        "with a 1-CPU limit is; without it Spark's one core is only a task slot",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(header("Capacity: the pipeline on a standalone cluster, by worker count"))
    pipeline_args = [
        "--events", str(args.events), "--topics", str(args.topics),
        "--envelope", str(args.envelope),
        "--max-offsets-per-trigger", str(args.max_offsets_per_trigger),
        "--warmup-s", str(args.warmup_s),
        "--shuffle-partitions", str(2 * max(args.workers)),
    ]  # fmt: skip
    runs = []
    for workers in args.workers:
        run = run_on_cluster(workers, pipeline_args, args.timeout_s, pin_cpus=args.pin_cpus)
        runs.append(run)
        print(f"workers={workers} -> {json.dumps(asdict(run))}", flush=True)
    rows = [
        [
            str(r.workers),
            "-" if r.events_per_s is None else f"{r.events_per_s:,.0f}",
            "-" if r.close_batch_s is None else f"{r.close_batch_s:.1f}",
            f"{r.wall_s:.0f}",
            r.error or "",
        ]
        for r in runs
    ]
    print(markdown_table(["workers", "events/s", "close batch s", "wall s", "error"], rows))
    gain = speedup(runs)
    print(
        f"speedup {min(args.workers)} -> {max(args.workers)} workers: "
        + ("-" if gain is None else f"{gain:.2f}x (target {TARGET_SPEEDUP}x from 1 to 2)")
    )
    print_result(
        {
            "benchmark": "capacity",
            "pin_cpus": args.pin_cpus,
            "runs": [asdict(r) for r in runs],
            "speedup": gain,
            "target_speedup": TARGET_SPEEDUP,
        }
    )
    return 0 if all(r.error is None for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
