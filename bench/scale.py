"""Scale: the pipeline benchmark at 1M and 10M simulated topics, with peak memory.

    .venv/bin/python -m bench.scale [--topics 1000000 10000000] [--envelope 100]

For each topic count it runs `bench.pipeline` in a child process (every topic reports once,
so the events are as many as the topics unless `--events-per-topic` says otherwise) and
samples the resident memory of that process and everything it started (the Spark JVM, the
Python workers, the embedded broker) every 0.2 s. It prints, per size, the job's and raw
consumption's events/s and the peak memory of the whole tree, then `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import header, markdown_table, print_result

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
LAST_LINE = re.compile(
    r"^events_per_s=(?P<job>[\d.]+) raw_events_per_s=(?P<raw>[\d.]+) ratio=(?P<ratio>[\d.]+)$"
)


@dataclass
class ScaleResult:
    topics: int
    events: int
    events_per_s: float | None
    raw_events_per_s: float | None
    ratio: float | None
    peak_rss_gib: float
    wall_s: float
    error: str | None = None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def tree_rss_bytes(root: int) -> int:
    """Resident memory of `root` and all its descendants."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            fields = Path(f"/proc/{pid}/statm").read_text().split()
            total += int(fields[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue  # the process ended between the listing and the read
        stack.extend(_children(pid))
    return total


def run_one(topics: int, events: int, extra: Sequence[str]) -> ScaleResult:
    cmd = [
        sys.executable,
        "-m",
        "bench.pipeline",
        "--topics",
        str(topics),
        "--events",
        str(events),
        *extra,
    ]
    started = time.monotonic()
    peak = 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as child:
        assert child.stdout is not None
        os.set_blocking(child.stdout.fileno(), False)
        output = b""
        while child.poll() is None:
            peak = max(peak, tree_rss_bytes(child.pid))
            chunk = child.stdout.read()
            if chunk:
                output += chunk
            time.sleep(0.2)
        output += child.stdout.read() or b""
    text = output.decode(errors="replace")
    found = [m for line in text.splitlines() if (m := LAST_LINE.match(line.strip()))]
    wall_s = time.monotonic() - started
    if child.returncode != 0 or not found:
        tail = " | ".join(text.strip().splitlines()[-3:])
        return ScaleResult(
            topics,
            events,
            None,
            None,
            None,
            peak / 1024**3,
            wall_s,
            error=f"exit {child.returncode}: {tail[:300]}",
        )
    m = found[-1]
    return ScaleResult(
        topics, events, float(m["job"]), float(m["raw"]), float(m["ratio"]), peak / 1024**3, wall_s
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topics", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument(
        "--events-per-topic",
        type=float,
        default=1.0,
        help="stats samples per topic (1: each topic reports once)",
    )
    p.add_argument(
        "--envelope",
        type=int,
        default=100,
        help="events per Kafka message (0: one each); passed to bench.pipeline",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(header("Scale: the pipeline at many topics"))
    extra = ["--envelope", str(args.envelope)]
    results = []
    for topics in args.topics:
        events = max(1, int(topics * args.events_per_topic))
        result = run_one(topics, events, extra)
        results.append(result)
        print(f"topics={topics} events={events} -> {json.dumps(asdict(result))}", flush=True)
    rows = [
        [
            f"{r.topics:,}",
            f"{r.events:,}",
            f"{r.events_per_s:,.0f}" if r.events_per_s else "-",
            f"{r.raw_events_per_s:,.0f}" if r.raw_events_per_s else "-",
            f"{r.ratio:.2f}" if r.ratio else "-",
            f"{r.peak_rss_gib:.2f}",
            f"{r.wall_s:.0f}",
            r.error or "",
        ]
        for r in results
    ]
    print(
        markdown_table(
            [
                "topics",
                "events",
                "job events/s",
                "raw events/s",
                "ratio",
                "peak RSS GiB",
                "wall s",
                "error",
            ],
            rows,
        )
    )
    print_result({"benchmark": "scale", "results": [asdict(r) for r in results]})
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
