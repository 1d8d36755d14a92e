"""`pulsar-balancer plan`: what the balancer would do to the clusters now, read-only.

Polls `GET /admin/v2/broker-stats/topics` of every broker of every cluster (the brokers of
`clusters[].brokers`, else those `GET /admin/v2/brokers/{cluster}` lists), SAMPLES times
INTERVAL seconds apart, and applies the controller's own rules (`balancer.core.planning`) to the
averaged samples. Only GET requests are sent: broker-stats, the broker list, each
namespace's bundles (for its bundle budget) and, per proposed offload, the offload status
and internalStats (for the offload point). With `--stats-file` nothing is asked of any
cluster: the plan is computed from saved broker-stats answers.

Exit codes (like `terraform plan -detailed-exitcode`, but 2 stays every command's error code):
  0  nothing to do
  2  error (unreachable cluster, 401, bad stats file, bad arguments): one line on stderr
  3  there are proposals (splits or offloads)

    pulsar-balancer plan --config conf/balancer.yaml
    pulsar-balancer plan --admin-url east=http://127.0.0.1:8080 --samples 3 --interval-s 30
    pulsar-balancer plan --stats-file saved/ -o json      # saved/<cluster>/<broker>.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from balancer.app.commands.output import (
    add_output_argument,
    non_negative,
    positive_int,
    print_json,
    wants_json,
)
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
from balancer.collector.targets import Target, broker_url, targets_for
from balancer.controller.offload_point import default_offload_point
from balancer.controller.settings import ControllerSettings
from balancer.core.planning import Plan, TopicSample, make_plan, window_loads

if TYPE_CHECKING:  # the admin client is imported when a cluster is asked
    from balancer.app.commands import Subparsers
    from balancer.core.decisions import OffloadDecision
    from balancer.pulsar.client import PulsarPeerGroup
    from balancer.pulsar.errors import PulsarAdminError
    from balancer.pulsar.models import BrokerTopicStats

_T = TypeVar("_T")

__all__ = ["EXIT_ERROR", "EXIT_NOTHING", "EXIT_PROPOSALS", "live_plan", "register", "take_samples"]

NAME = "plan"
# Pulsar refreshes broker-stats every statsUpdateFrequencyInSecs (60 s by default): samples
# closer together would repeat the same figures.
DEFAULT_INTERVAL_S = 60.0
DEFAULT_SAMPLES = 2


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="read-only: the splits and offloads the balancer would make now (exit 3: some)",
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
    add_output_argument(parser)
    parser.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace, *, sleep: Callable[[float], None] = time.sleep) -> int:
    if not logging.getLogger().handlers:
        # The admin client's retry warnings would precede the one-line error; the error
        # itself says how many attempts failed.
        logging.getLogger().addHandler(logging.NullHandler())
    config = _config(args)
    now_ms = int(time.time() * 1000)
    settings = _controller_settings(config)
    points: dict[str, OffloadPoint] = {}
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

        plan, points = live_plan(
            config,
            samples=args.samples,
            interval_s=args.interval_s,
            sleep=wait,
            allows=settings.allows,
        )
        source = "clusters " + ", ".join(c.name for c in config.clusters)
    code = EXIT_PROPOSALS if plan.has_proposals else EXIT_NOTHING
    if wants_json(args):
        print_json(plan_json(plan, points, source=source, exit_code=code))
    else:
        print_plan(plan, points, source=source, exit_code=code)
    return code


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


# --- live ----------------------------------------------------------------------------------


def live_plan(
    config: BalancerConfig,
    *,
    samples: int,
    interval_s: float,
    sleep: Callable[[float], None],
    allows: Callable[[str], bool],
) -> tuple[Plan, dict[str, OffloadPoint]]:
    """Poll, plan and find each offload's point; every request is a GET."""
    from balancer.app.pulsar_wiring import peer_group_from_config
    from balancer.pulsar.errors import PulsarAdminError

    with peer_group_from_config(config) as admin:
        try:
            taken = take_samples(admin, config, samples=samples, interval_s=interval_s, sleep=sleep)
            bundles = window_loads(taken)
            counts = {}
            for cluster, namespace in sorted({(b.cluster, b.namespace) for b in bundles}):
                layout = _ask(cluster, functools.partial(admin.get_bundles, namespace))
                counts[(cluster, namespace)] = layout.num_bundles
            plan = make_plan(
                bundles,
                thresholds=config.thresholds_model(),
                detection=config.detection_settings(),
                allows=allows,
                now_ms=int(time.time() * 1000),
                bundle_counts=counts,
            )
            points = {o.decision_id: _offload_point(admin, o) for o in plan.offloads}
        except PulsarAdminError as exc:
            raise ValueError(_describe(exc)) from None
    # broker-stats' storageSize still counts offloaded ledgers: a topic whose BookKeeper
    # bytes are under its threshold (no point to offload up to) is no proposal, as `run`'s
    # BookKeeper check decides nothing for it.
    moved = {d for d, p in points.items() if p.message_id is not None or p.note != NO_POINT}
    plan = dataclasses.replace(
        plan, offloads=tuple(o for o in plan.offloads if o.decision_id in moved)
    )
    return plan, {d: p for d, p in points.items() if d in moved}


NO_POINT = "no ledger to offload above the threshold"


def take_samples(
    admin: PulsarPeerGroup,
    config: BalancerConfig,
    *,
    samples: int,
    interval_s: float,
    sleep: Callable[[float], None],
) -> list[TopicSample]:
    """`samples` rounds of broker-stats of every broker of every cluster."""
    targets = _targets(admin, config)
    taken: list[TopicSample] = []
    for i in range(samples):
        if i:
            sleep(interval_s)
        for target in targets:
            taken.extend(_poll(admin, target))
    return taken


def _targets(admin: PulsarPeerGroup, config: BalancerConfig) -> list[Target]:
    clusters: dict[str, list[str]] = {}
    for c in config.clusters:
        if c.brokers:
            clusters[c.name] = list(c.brokers)
            continue
        listed = _ask(c.name, functools.partial(admin.list_brokers, c.name))
        clusters[c.name] = [broker_url(address, c.admin_url) for address in listed]
    return targets_for(clusters)


def _poll(admin: PulsarPeerGroup, target: Target) -> list[TopicSample]:
    """One broker's broker-stats as samples (the collector's event conversion)."""
    poll_ms = int(time.time() * 1000)
    stats = _ask(
        target.cluster, lambda: admin.broker_topic_stats(target.cluster, target.broker_url)
    )
    _say_rejected(stats, str(target))
    return [
        TopicSample(
            entry.namespace,
            entry.bundle,
            entry.stats.to_event(
                cluster=target.cluster,
                topic=entry.topic,
                timestamp_ms=poll_ms,
                broker=target.broker,
            ),
        )
        for entry in stats
    ]


def _ask(cluster: str, call: Callable[[], _T]) -> _T:
    from balancer.pulsar.errors import PulsarAdminError
    from balancer.pulsar.routing import routed_to

    try:
        with routed_to(cluster):  # Pulsar answers these locally: ask where the stats came from
            return call()
    except PulsarAdminError as exc:
        if exc.cluster is None:
            exc.cluster = cluster
        raise
    except ValueError as exc:  # an answer of the wrong shape
        raise ValueError(f"cluster {cluster}: {exc}") from None


def _describe(exc: PulsarAdminError) -> str:
    # The client's URLs and messages never carry credentials.
    if exc.status is None:  # no answer: the client's message names the request and cause
        return f"cluster {exc.cluster}: {exc}"
    where = f" {exc.method} {exc.url}" if exc.url else ""
    return f"cluster {exc.cluster}:{where}: HTTP {exc.status} {exc.reason or exc}".rstrip()


def _offload_point(admin: PulsarPeerGroup, offload: OffloadDecision) -> OffloadPoint:
    """The controller's own checks before an offload: status, then the size rule."""
    from balancer.pulsar.models import OffloadState

    status = _ask(offload.cluster, lambda: admin.offload_status(offload.topic))
    if status.state is OffloadState.RUNNING:
        return OffloadPoint(None, "an offload is already running")
    stats = _ask(offload.cluster, lambda: admin.internal_stats(offload.topic))
    point = default_offload_point(stats, offload.threshold_bytes)
    if point is None:
        return OffloadPoint(None, NO_POINT)
    return OffloadPoint(point.to_json(), f"offload every ledger before {point.ledger_id}")


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
        _say_rejected(stats, f"stats file {file}")
        samples.extend(
            TopicSample(
                e.namespace,
                e.bundle,
                e.stats.to_event(cluster=cluster, topic=e.topic, timestamp_ms=now_ms),
            )
            for e in stats
        )
    return samples


def _say_rejected(stats: BrokerTopicStats, where: str) -> None:
    """Malformed topic entries are left out of the plan: say which, on stderr (stdout is
    the plan alone)."""
    for entry in stats.rejected:
        print(
            f"plan: {where}: topic {entry.topic} left out ({entry.reason.value}: {entry.detail})",
            file=sys.stderr,
            flush=True,
        )
