"""`pulsar-balancer simulate --scenario FILE [--port P] [--time-scale X] [--seed N] [faults]`:
serve a simulated Pulsar peer group on 127.0.0.1 until Ctrl-C / SIGTERM.

With `--port P`, cluster i of the scenario (in file order) serves its admin API on port P+i;
the other brokers of each cluster take OS-chosen ports (all are printed). Simulated time
follows the wall clock scaled by `--time-scale` (60: one real second is one simulated minute).
Fault options (`--latency-s`, `--error-rate-500`, `--error-rate-503`, `--drop-rate`,
`--redirect-loop-rate`, limited by `--fault-cluster` / `--fault-path`, and `--down CLUSTER`)
set the simulator's `FaultInjector` for the whole run.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from balancer.sim.group import PeerGroup
from balancer.sim.scenarios import ScenarioError, load_scenario

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "simulate"
DEFAULT_TIME_SCALE = 60.0


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="serve a simulated Pulsar peer group from a scenario file",
        description=(
            "Start one HTTP server per simulated broker on 127.0.0.1 answering Pulsar's admin "
            "REST API, with traffic from the scenario's model; print the clusters' admin URLs."
        ),
    )
    parser.add_argument("--scenario", type=Path, required=True, help="scenario YAML file")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="admin port of the first cluster (the next clusters take the next ports); "
        "default: OS-chosen",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=DEFAULT_TIME_SCALE,
        help=f"simulated seconds per real second (default {DEFAULT_TIME_SCALE:g})",
    )
    parser.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    parser.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="stop after this many real seconds (default: run until interrupted)",
    )
    faults = parser.add_argument_group(
        "faults",
        "Injected into every answer of the chosen clusters and paths (default: all), drawn "
        "from the seeded RNG. The rates are shares of requests in [0, 1]; one draw per "
        "request picks drop | 500 | 503 | 307 loop | none.",
    )
    faults.add_argument(
        "--latency-s", type=float, default=0.0, help="delay every answer by this many seconds"
    )
    faults.add_argument(
        "--error-rate-500", type=float, default=0.0, help="share answered 500 (Pulsar's reason)"
    )
    faults.add_argument(
        "--error-rate-503", type=float, default=0.0, help="share answered 503 (Pulsar's reason)"
    )
    faults.add_argument(
        "--drop-rate",
        type=float,
        default=0.0,
        help="share of connections closed without an answer",
    )
    faults.add_argument(
        "--redirect-loop-rate",
        type=float,
        default=0.0,
        help="share answered 307 to the very URL asked (a client must detect the loop)",
    )
    faults.add_argument(
        "--fault-cluster",
        action="append",
        default=[],
        metavar="CLUSTER",
        help="limit the rates and latency to this cluster's brokers (repeatable)",
    )
    faults.add_argument(
        "--fault-path",
        action="append",
        default=[],
        metavar="TEXT",
        help="limit the rates and latency to paths containing TEXT, e.g. /split (repeatable)",
    )
    faults.add_argument(
        "--down",
        action="append",
        default=[],
        metavar="CLUSTER",
        help="this cluster answers nothing: every connection is closed unanswered (repeatable)",
    )
    parser.set_defaults(handler=run)


def _configure_faults(group: PeerGroup, args: argparse.Namespace) -> str | None:
    """Apply the fault options; an error message naming the option, else None."""
    rates = {
        "--error-rate-500": args.error_rate_500,
        "--error-rate-503": args.error_rate_503,
        "--drop-rate": args.drop_rate,
        "--redirect-loop-rate": args.redirect_loop_rate,
    }
    for option, value in rates.items():
        if not 0.0 <= value <= 1.0:
            return f"{option} must be in [0, 1], got {value:g}"
    if not args.latency_s >= 0:
        return f"--latency-s must be >= 0, got {args.latency_s:g}"
    known = set(group.model.clusters)
    for cluster in [*args.fault_cluster, *args.down]:
        if cluster not in known:
            return f"unknown cluster {cluster!r} (scenario clusters: {', '.join(sorted(known))})"
    group.faults.configure(
        latency_s=args.latency_s,
        error_rate_500=args.error_rate_500,
        error_rate_503=args.error_rate_503,
        drop_connection_rate=args.drop_rate,
        redirect_loop_rate=args.redirect_loop_rate,
        only_clusters=tuple(args.fault_cluster),
        only_paths=tuple(args.fault_path),
        down_clusters=tuple(args.down),
    )
    return None


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if args.time_scale < 0:
        print(f"error: --time-scale must be >= 0, got {args.time_scale}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ports = {c.name: args.port + i for i, c in enumerate(scenario.clusters)} if args.port else None
    group = PeerGroup.from_scenario(scenario, seed=args.seed, time_scale=args.time_scale)
    problem = _configure_faults(group, args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        running = group.start(ports=ports)
        try:
            print(
                f"simulating scenario {scenario.name!r} (seed {group.scenario.seed}, "
                f"time scale {args.time_scale:g})"
            )
            for name, url in running.admin_urls.items():
                brokers = " ".join(running.broker_urls[name])
                down = " (down)" if name in args.down else ""
                print(f"cluster {name} admin {url} brokers {brokers}{down}")
            sys.stdout.flush()
            stop.wait(args.duration_s)
        finally:
            running.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped")
    return 0
