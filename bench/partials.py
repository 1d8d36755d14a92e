"""Benchmark: `streaming.stage.partials.bundle_partials` on synthetic closed buckets (issue 44:
it was most of `ours`' step in a replay, and it runs in `run`'s stage on the executors).

Each bucket is `--rows` topics spread at random over `--namespaces` namespaces (layouts of
`--bundles` equal bundles), every topic also known; rates log-normal with a tenth idle.
Times `--repeat` runs over `--buckets` buckets (CPU seconds of this process, numpy being
single-threaded) and prints each run's, the median and the fastest; ends with `RESULT <json>`.

    python -m bench.partials                                       # 100k topics: 4 x 25,000
    python -m bench.partials --namespaces 80 --bundles 128 --rows 300000 --buckets 2  # 10M-like

For an A/B, run this file with another checkout's code first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyarrow as pa

from balancer.core.bundles import NamespaceBundles
from bench.common import header, print_result
from streaming.shared.packing import WINDOW_SCHEMA
from streaming.shared.schema import RATE_COLUMNS
from streaming.stage.closing import KNOWN_POSITIONS_SCHEMA
from streaming.stage.partials import bundle_partials


def bucket_tables(
    rng: np.random.Generator, namespaces: int, rows: int
) -> tuple[pa.Table, pa.Table]:
    """One closed bucket's window rows and its known topics (the same topics)."""
    ns = rng.integers(0, namespaces, rows)
    names = [f"t/ns{i}" for i in range(namespaces)]
    idle = rng.random(rows) < 0.1
    msg_in = np.where(idle, 0.0, rng.lognormal(1.0, 2.0, rows))
    size_bytes = rng.lognormal(7.0, 1.0, rows)
    subscriptions = rng.integers(1, 4, rows)
    rates = {
        "msg_rate_in": msg_in,
        "msg_rate_out": msg_in * subscriptions,
        "msg_throughput_in": msg_in * size_bytes,
        "msg_throughput_out": msg_in * size_bytes * subscriptions,
    }
    positions = rng.integers(0, 0x100000000, rows)
    cluster = pa.array(["c1"] * rows)
    namespace = pa.array([names[i] for i in ns.tolist()])
    columns = {
        "cluster": cluster,
        "namespace": namespace,
        "position": pa.array(positions, pa.int64()),
        **{name: pa.array(rates[name], pa.float64()) for name in RATE_COLUMNS},
        "producer_count": pa.array(rng.integers(0, 3, rows), pa.int64()),
        "consumer_count": pa.array(subscriptions, pa.int64()),
    }
    schema = pa.schema([WINDOW_SCHEMA.field(name) for name in columns])
    window = pa.table(columns, schema=schema)
    known = pa.table(
        {"cluster": cluster, "namespace": namespace, "position": columns["position"]},
        schema=KNOWN_POSITIONS_SCHEMA,
    )
    return window, known


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--bundles", type=int, default=4, help="bundles a namespace")
    parser.add_argument("--rows", type=int, default=25_000, help="topics a bucket")
    parser.add_argument("--buckets", type=int, default=4, help="buckets a run")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs")
    parser.add_argument("--seed", type=int, default=44)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    buckets = [bucket_tables(rng, args.namespaces, args.rows) for _ in range(args.buckets)]
    layouts = {
        ("c1", f"t/ns{i}"): NamespaceBundles.initial(f"t/ns{i}", args.bundles)
        for i in range(args.namespaces)
    }
    print(header("bundle_partials"))
    print(
        f"{args.buckets} buckets of {args.rows:,} topics, {args.namespaces} namespaces of "
        f"{args.bundles} bundles; CPU s a run of all buckets"
    )
    runs_s: list[float] = []
    partial_rows = 0
    for _ in range(args.repeat):
        started = time.process_time()
        partial_rows = sum(
            bundle_partials(window, known, layouts, bucket=b).num_rows
            for b, (window, known) in enumerate(buckets)
        )
        runs_s.append(time.process_time() - started)
        print(f"run: {runs_s[-1]:.3f} s")
    median_s, fastest_s = statistics.median(runs_s), min(runs_s)
    print(
        f"median {median_s:.3f} s, fastest {fastest_s:.3f} s, {partial_rows:,} partial rows a run"
    )
    print_result(
        {
            "namespaces": args.namespaces,
            "bundles": args.bundles,
            "rows": args.rows,
            "buckets": args.buckets,
            "partial_rows": partial_rows,
            "runs_s": [round(s, 4) for s in runs_s],
            "median_s": round(median_s, 4),
            "fastest_s": round(fastest_s, 4),
        }
    )


if __name__ == "__main__":
    main()
