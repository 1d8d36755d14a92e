"""`pulsar-balancer plan`: what the balancer would do to the clusters now, read-only.

Polls `GET /admin/v2/broker-stats/topics` of every broker of every cluster (the brokers of
`clusters[].brokers`, else those `GET /admin/v2/brokers/{cluster}` lists), SAMPLES times
INTERVAL seconds apart, and applies the controller's own rules (`balancer.core.planning`) to the
averaged samples. Only GET requests are sent: broker-stats, the broker list, each
namespace's bundles (for its bundle budget) and, per proposed offload, the offload status
and internalStats (for the offload point) and, for the moves between brokers, each broker's
load report and the placement rules (`balancer.app.commands.plan_moves`: each broker's load
before and after, each move and its reason). With `--stats-file` nothing is asked of any
cluster: the plan is computed from saved broker-stats answers (no broker loads: no moves).

It plans what it can. A cluster that cannot be read (down, 401, a broker that fails) is
left out whole, named in the output ("Not read: ...", the JSON's `errors`), and the other
clusters are planned; a topic deleted between two calls (a 404 on its offload status or
internalStats) is listed as skipped (`vanished`), which changes nothing else.

Exit codes (like `terraform plan -detailed-exitcode`, but 2 stays every command's error code):
  0  nothing to do in the clusters read
  2  error: NO cluster could be read, or a bad stats file or arguments: one line on stderr
  3  there are proposals (splits, offloads or moves) in the clusters read, or bundles of a
     broker to drain that cannot leave it (`--drain`)

    pulsar-balancer plan --config conf/balancer.yaml
    pulsar-balancer plan --admin-url east=http://127.0.0.1:8080 --samples 3 --interval-s 30
    pulsar-balancer plan --stats-file saved/ -o json      # saved/<cluster>/<broker>.json
    pulsar-balancer plan --config conf/balancer.yaml --save plan.json   # then: apply plan.json
    pulsar-balancer plan --config conf/balancer.yaml --drain 10.0.0.7:8080 --save drain.json

With `--drain BROKER...` the plan also moves every bundle off the named brokers (their
heartbeat namespaces excepted) to brokers that stay, within the placement rules and the
target computed without them; bundles that cannot go are listed with the reason. A BROKER
that is no broker of the clusters read is an error (exit 2).

With `--save PLAN.json` the plan is also written as a versioned, hash-identified document
(`balancer.core.plan_document`) that `pulsar-balancer apply PLAN.json` carries out. Only
offloads with an offload point and the moves `run` would act on are saved.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from balancer.app.commands.output import (
    add_output_argument,
    non_negative,
    positive_int,
    print_json,
    wants_json,
)
from balancer.app.commands.plan_live import LivePlan, live_plan, say_rejected, take_samples
from balancer.app.commands.plan_moves import STATS_FILE_NOTE, MovesPlan
from balancer.app.commands.plan_output import (
    EXIT_ERROR,
    EXIT_NOTHING,
    EXIT_PROPOSALS,
    OffloadPoint,
    plan_json,
    print_plan,
)
from balancer.app.config import BalancerConfig, load_config
from balancer.app.controller_wiring import controller_settings
from balancer.controller.settings import ControllerSettings
from balancer.core.planning import Plan, TopicSample, make_plan, window_loads

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOTHING",
    "EXIT_PROPOSALS",
    "LivePlan",
    "live_plan",
    "register",
    "take_samples",
]

NAME = "plan"
# Pulsar refreshes broker-stats every statsUpdateFrequencyInSecs (60 s by default): samples
# closer together would repeat the same figures.
DEFAULT_INTERVAL_S = 60.0
DEFAULT_SAMPLES = 2


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="read-only: the splits, offloads and moves the balancer would make now (exit 3: some)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, help="balancer YAML config (clusters and rules)")
    parser.add_argument(
        "--admin-url",
        action="append",
        default=[],
        metavar="CLUSTER=URL",
        help="without --config: a cluster and its admin URL (repeat per cluster; default rules)",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=DEFAULT_SAMPLES,
        help=f"broker-stats samples to average (default {DEFAULT_SAMPLES})",
    )
    parser.add_argument(
        "--interval-s",
        type=non_negative,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between samples (default {DEFAULT_INTERVAL_S:g}, Pulsar's stats period)",
    )
    parser.add_argument(
        "--stats-file",
        type=Path,
        metavar="PATH",
        help="offline: a saved broker-stats/topics answer, or a directory of them "
        "(one file per broker; in <cluster>/ subdirectories, or name it with --cluster)",
    )
    parser.add_argument(
        "--cluster",
        metavar="NAME",
        help="--stats-file: the cluster of files not in a <cluster>/ subdirectory "
        "(default: the config's first cluster, else 'standalone')",
    )
    parser.add_argument(
        "--drain",
        nargs="+",
        default=[],
        metavar="BROKER",
        help="propose moving every bundle off these brokers (host:port, as the cluster "
        "lists them; heartbeat namespaces stay): before removing or stopping them",
    )
    parser.add_argument(
        "--save",
        type=Path,
        metavar="PLAN.json",
        help="also write the plan as a reviewable document for `pulsar-balancer apply` "
        "(live clusters only)",
    )
    add_output_argument(parser)
    parser.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace, *, sleep: Callable[[float], None] = time.sleep) -> int:
    if not logging.getLogger().handlers:
        # The admin client's retry warnings would precede the one-line error; the error
        # itself says how many attempts failed.
        logging.getLogger().addHandler(logging.NullHandler())
    config = _config(args)
    save: Path | None = getattr(args, "save", None)
    if save is not None and (args.stats_file is not None or config is None):
        # A stats file has no layouts, owners nor offload points: nothing exact to apply.
        raise ValueError("--save needs live clusters (--config or --admin-url)")
    drain = frozenset(getattr(args, "drain", None) or ())
    if drain:
        if args.stats_file is not None or config is None:
            raise ValueError("--drain needs live clusters (--config or --admin-url)")
        if not config.moves.enabled:
            raise ValueError("--drain needs moves (moves.enabled is false in the config)")
    now_ms = int(time.time() * 1000)
    settings = _controller_settings(config)
    points: dict[str, OffloadPoint] = {}
    errors: dict[str, str] = {}  # cluster -> why it was not read
    if args.stats_file is not None:
        default = args.cluster or (config.clusters[0].name if config else "standalone")
        samples = read_stats_files(args.stats_file, default_cluster=default, now_ms=now_ms)
        plan = make_plan(
            window_loads(samples),
            thresholds=_cfg(config).thresholds_model(),
            detection=_cfg(config).detection_settings(),
            allows=settings.allows,
            now_ms=now_ms,
        )
        for o in plan.offloads:
            points[o.decision_id] = OffloadPoint(None, "offline: needs the topic's internalStats")
        moves: MovesPlan | None = MovesPlan(note=STATS_FILE_NOTE)
        source = f"stats file {args.stats_file}"
    else:
        if config is None:
            raise ValueError("give --config FILE, --admin-url CLUSTER=URL or --stats-file PATH")
        taken = [1]

        def wait(seconds: float) -> None:
            # Progress on stderr: stdout stays the plan alone (one JSON document with -o json).
            if seconds > 0:
                print(
                    f"plan: sample {taken[0]} of {args.samples} taken; the next in {seconds:g} s",
                    file=sys.stderr,
                    flush=True,
                )
            taken[0] += 1
            sleep(seconds)

        layouts: dict[tuple[str, str], tuple[int, ...]] = {}
        plan, points, errors, moves = live_plan(
            config,
            samples=args.samples,
            interval_s=args.interval_s,
            sleep=wait,
            allows=settings.allows,
            layouts=layouts,
            drain=drain,
        )
        source = "clusters " + ", ".join(c.name for c in config.clusters)
        if save is not None:
            _save(save, config, source, plan, points, moves, layouts)
    # A bundle of a draining broker that cannot leave is no "nothing to do": the broker
    # is not empty (a scale-in script must not go on to stop it).
    stuck = moves is not None and any(c.plan.drain_blocked for c in moves.clusters.values())
    proposals = plan.has_proposals or bool(moves is not None and moves.moves) or stuck
    code = EXIT_PROPOSALS if proposals else EXIT_NOTHING
    if wants_json(args):
        print_json(
            plan_json(plan, points, source=source, exit_code=code, errors=errors, moves=moves)
        )
    else:
        print_plan(plan, points, source=source, exit_code=code, errors=errors, moves=moves)
    return code


def _save(
    path: Path,
    config: BalancerConfig,
    source: str,
    plan: Plan,
    points: dict[str, OffloadPoint],
    moves: MovesPlan | None,
    layouts: dict[tuple[str, str], tuple[int, ...]],
) -> None:
    from balancer.app.commands.plan_file import save_plan

    doc = save_plan(
        path,
        config=config,
        source=source,
        plan=plan,
        points=points,
        moves=moves.moves if moves is not None else [],
        layouts=layouts,
        now_ms=int(time.time() * 1000),
        move_plan_clusters=tuple(moves.clusters) if moves is not None else (),
    )
    # On stderr: stdout stays the plan alone (one JSON document with -o json).
    print(
        f"plan: saved {doc['plan_id']} ({len(doc['actions'])} action(s)) to {path}; "
        f"apply it with: pulsar-balancer apply {path}",
        file=sys.stderr,
        flush=True,
    )


def _cfg(config: BalancerConfig | None) -> BalancerConfig:
    return (
        config
        if config is not None
        else BalancerConfig.from_mapping(
            {"clusters": [{"name": "standalone", "admin_url": "http://127.0.0.1:8080"}]}
        )
    )


def _config(args: argparse.Namespace) -> BalancerConfig | None:
    if args.config is not None and args.admin_url:
        raise ValueError("give --config or --admin-url, not both")
    if args.config is not None:
        return load_config(args.config)
    if not args.admin_url:
        return None
    clusters = []
    for value in args.admin_url:
        name, sep, url = value.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"--admin-url {value!r}: expected CLUSTER=http(s)://host:port")
        clusters.append({"name": name, "admin_url": url})
    return BalancerConfig.from_mapping({"clusters": clusters}, source="--admin-url")


def _controller_settings(config: BalancerConfig | None) -> ControllerSettings:
    return controller_settings(_cfg(config))


# --- offline -------------------------------------------------------------------------------


def read_stats_files(path: Path, *, default_cluster: str, now_ms: int) -> list[TopicSample]:
    """Samples from saved broker-stats answers: PATH is one file, or a directory of them
    (`*.json`; files in a subdirectory belong to the cluster it names)."""
    from balancer.pulsar.models import BrokerTopicStats

    if path.is_dir():
        files = [(default_cluster, f) for f in sorted(path.glob("*.json"))]
        files += [
            (d.name, f)
            for d in sorted(path.iterdir())
            if d.is_dir()
            for f in sorted(d.glob("*.json"))
        ]
        if not files:
            raise ValueError(f"stats directory {path}: no *.json file")
    elif path.exists():
        files = [(default_cluster, path)]
    else:
        raise ValueError(f"stats file {path}: no such file or directory")
    samples: list[TopicSample] = []
    for cluster, file in files:
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"stats file {file}: not valid JSON (truncated?): {exc.msg} at line {exc.lineno}"
            ) from None
        except UnicodeDecodeError:
            raise ValueError(f"stats file {file}: not UTF-8 text") from None
        try:
            stats = BrokerTopicStats.from_json(cluster, body)
        except ValueError as exc:
            raise ValueError(
                f"stats file {file}: not a broker-stats/topics answer: {exc}"
            ) from None
        say_rejected(stats, f"stats file {file}")
        samples.extend(
            TopicSample(
                e.namespace,
                e.bundle,
                e.stats.to_event(cluster=cluster, topic=e.topic, timestamp_ms=now_ms),
            )
            for e in stats
        )
    return samples
