"""Hit rate of the window stage's local copies of its list states (`streaming.stage.state_cache`).

    PULSAR_BALANCER_STATE_CACHE_LOG=/tmp/copies.log .venv/bin/python -m bench.pipeline ...
    .venv/bin/python -m bench.state_cache_hits /tmp/copies.log

The log has a line per read and write of a copy: `<pid> <route> <list> hit|miss|write`.
It prints the reads that took a copy, by list kind, and how many of them a cache in the
Python worker's memory would have served: those whose (route, list) was last read or
written by the same worker process (Spark hands a task any idle worker of the pool).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Sequence


def hit_rates(lines: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per list kind (`packs`, `known`): reads, copy hits, same-process hits."""
    last_pid: dict[tuple[str, str], str] = {}
    counts: dict[str, Counter[str]] = {}
    for line in lines:
        fields = line.split()
        if len(fields) != 4:
            continue
        pid, route, name, what = fields
        kind = name.split("_")[0]
        count = counts.setdefault(kind, Counter())
        if what in ("hit", "miss"):
            count["reads"] += 1
            count["hits"] += what == "hit"
            count["same_process_hits"] += what == "hit" and last_pid.get((route, name)) == pid
        last_pid[(route, name)] = pid
    return {kind: dict(count) for kind, count in sorted(counts.items())}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", help="the file PULSAR_BALANCER_STATE_CACHE_LOG named")
    args = p.parse_args(argv)
    with open(args.log, encoding="utf-8") as log:
        for kind, count in hit_rates(log).items():
            reads = max(count.get("reads", 0), 1)
            print(
                f"{kind}: {count.get('reads', 0)} reads, copies {count.get('hits', 0)} "
                f"({count.get('hits', 0) / reads:.0%}), same worker process "
                f"{count.get('same_process_hits', 0)} "
                f"({count.get('same_process_hits', 0) / reads:.0%})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
