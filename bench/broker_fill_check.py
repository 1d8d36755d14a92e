"""Random small clusters with an idle broker: our move decision cycle after cycle, to compare
two trees' fills (issue 43's final balance). Not a target of its own: an A/B check.

Each cluster (seeded, so both trees see the same ones): 3 or 4 brokers of one capacity, one
owning nothing (restarted); the others own 4 to 30 bundles in two namespaces sharing their
ranges, each bundle's load drawn from a lognormal (a few large, many small), a fifth of
them moved 1 to 29 minutes before (in their grace period). A broker's load is the sum of
its bundles' loads. `decide_moves` once a minute, its moves applied at once, for up to
`--minutes` minutes.

Per cluster: the moves, the minute it was balanced (`is_balanced`; loads are constant, so a
balanced cluster stays so: the run stops there), and the most moves of one bundle. Run the
same command under each tree (`PYTHONPATH`), then `--compare A.json B.json`.

Run: `.venv/bin/python -m bench.broker_fill_check --out B.json` (`--help`).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import TypedDict

from balancer.core.broker_load import BrokerCapacity, bundle_load_ratio
from balancer.core.bundles import BundleRange
from balancer.core.moves.decide import decide_moves, is_balanced
from balancer.core.moves.model import BrokerState, BundleState, MoveSettings, PlacementRules

CAPACITY = BrokerCapacity(max_msg_rate=1000.0, max_throughput_bytes=1e12)
MINUTE_MS = 60_000


class ClusterFigures(TypedDict):
    seed: int
    moves: int
    balanced_min: int | None  # None: not balanced at the end
    max_moves_of_a_bundle: int


def random_cluster(seed: int) -> tuple[list[BrokerState], list[BundleState]]:
    rng = random.Random(seed)
    names = [f"b{i}:8080" for i in range(rng.choice((3, 4)))]
    bundles: list[BundleState] = []
    for owner in names[1:]:  # names[0] restarted: it owns nothing
        for _ in range(rng.randint(4, 30)):
            i = len(bundles)
            lower = (i // 2) * 0x01000000  # two namespaces share each range
            moved = rng.randint(1, 29) if rng.random() < 0.2 else None
            bundles.append(
                BundleState(
                    namespace=("t/a", "t/b")[i % 2],
                    bundle=BundleRange(lower, lower + 0x01000000),
                    owner=owner,
                    msg_rate=min(400.0, rng.lognormvariate(2.5, 0.8)),
                    sessions=rng.randint(1, 50),
                    topics=1,
                    last_moved_ms=-moved * MINUTE_MS if moved else None,
                )
            )
    brokers = [BrokerState(broker=n, load_ratio=0.0, capacity=CAPACITY) for n in names]
    return brokers, bundles


def _loads(brokers: Sequence[BrokerState], bundles: Sequence[BundleState]) -> dict[str, float]:
    loads = {b.broker: 0.0 for b in brokers}
    for x in bundles:
        loads[x.owner] += bundle_load_ratio(x.msg_rate, x.throughput_bytes, CAPACITY)
    return loads


def run_cluster(seed: int, minutes: int, settings: MoveSettings) -> ClusterFigures:
    brokers, bundles = random_cluster(seed)
    moved: Counter[str] = Counter()
    balanced_since: int | None = None
    for minute in range(minutes):
        now_ms = minute * MINUTE_MS
        loads = _loads(brokers, bundles)
        brokers = [replace(b, load_ratio=loads[b.broker]) for b in brokers]
        plan = decide_moves(
            "c", brokers, bundles, rules=PlacementRules(), settings=settings,
            now_ms=now_ms, window_end_ms=now_ms,
        )  # fmt: skip
        to = {(m.namespace, str(m.bundle)): m.destination for m in plan.moves}
        bundles = [
            replace(x, owner=to[key], last_moved_ms=now_ms)
            if (key := (x.namespace, str(x.bundle))) in to
            else x
            for x in bundles
        ]
        moved.update(f"{n}/{r}" for n, r in to)
        if is_balanced(_loads(brokers, bundles), settings):
            # Balanced, the decision moves nothing (loads are constant here): done.
            balanced_since = minute
            break
    return ClusterFigures(
        seed=seed,
        moves=sum(moved.values()),
        balanced_min=balanced_since,
        max_moves_of_a_bundle=max(moved.values(), default=0),
    )


def compare(a_path: str, b_path: str) -> dict[str, int]:
    """How B's clusters differ from A's (same seeds)."""
    with open(a_path) as a_file, open(b_path) as b_file:
        a = {c["seed"]: c for c in json.load(a_file)}
        b = {c["seed"]: c for c in json.load(b_file)}
    out = Counter[str]()
    for seed, x in a.items():
        y = b[seed]
        out["clusters"] += 1
        out["fewer moves"] += y["moves"] < x["moves"]
        out["more moves"] += y["moves"] > x["moves"]
        out["moves A"] += x["moves"]
        out["moves B"] += y["moves"]
        out["unbalanced A"] += x["balanced_min"] is None
        out["unbalanced B"] += y["balanced_min"] is None
        both = x["balanced_min"] is not None and y["balanced_min"] is not None
        out["balanced later"] += both and y["balanced_min"] > x["balanced_min"]
        out["balanced sooner"] += both and y["balanced_min"] < x["balanced_min"]
        out["a bundle moved twice A"] += x["max_moves_of_a_bundle"] > 1
        out["a bundle moved twice B"] += y["max_moves_of_a_bundle"] > 1
    return dict(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=4000, help="random clusters (4000)")
    parser.add_argument("--minutes", type=int, default=40, help="decision cycles each (40)")
    parser.add_argument("--out", help="write each cluster's figures (JSON) here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two --out files")
    args = parser.parse_args(argv)
    if args.compare:
        print(json.dumps(compare(*args.compare), indent=1))
        return 0
    settings = MoveSettings()
    figures = [run_cluster(seed, args.minutes, settings) for seed in range(args.clusters)]
    if args.out:
        with open(args.out, "w") as out:
            json.dump(figures, out)
    print(
        json.dumps(
            {
                "clusters": len(figures),
                "moves": sum(f["moves"] for f in figures),
                "unbalanced": sum(f["balanced_min"] is None for f in figures),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
