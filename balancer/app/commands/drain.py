"""`pulsar-balancer drain`: mark brokers draining, unmark them, list the marks, or wait until
a marked broker owns no bundle (a broker pod's preStop hook, a Job).

A mark is a record on the compacted Kafka topic `kafka.drain_marks_topic`; every balancer of
the peer group re-reads it each cycle, so a mark needs no restart, outlives one, and the
standby sees it too. A draining broker gets no new bundle and is emptied at the configured
pace; once it has gone (unlisted) and is listed again, its mark is cleared.

    pulsar-balancer drain --config conf/balancer.yaml b3.pulsar:8080        # mark
    pulsar-balancer drain --config conf/balancer.yaml --undo b3.pulsar:8080 # unmark
    pulsar-balancer drain --config conf/balancer.yaml --list                # show the marks
    pulsar-balancer drain --config conf/balancer.yaml --wait --timeout-s 900 b3.pulsar:8080

BROKER is the broker id `host:port` as `GET /admin/v2/brokers/{cluster}` lists it (its
advertised address and web service port). `--wait` marks, then asks the broker every
`--interval-s` which bundles it owns (`ownedNamespaces`, its heartbeat and system
namespaces excepted). It is safe to run twice (a broker already marked keeps its mark).
With no balancer holding the writer lease, `--wait` drains by itself: it takes the lease
and, while it holds it, runs the controller's drain cycle each `--interval-s`
(`balancer.app.self_drain`; its journal is `controller.journal_path` or `--journal`); a
balancer that starts meanwhile takes the lease over and the command only waits.

Exit codes:
  0  done (with --wait: every broker owns no bundle)
  2  error: a broker the cluster does not list, Kafka or Pulsar unreachable, bad arguments
  3  --wait timed out: the bundles left are named
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kafka.errors import KafkaError

from balancer.app.commands.output import (
    add_output_argument,
    make_table,
    non_negative,
    print_json,
    print_tables,
    wants_json,
)
from balancer.app.config import BalancerConfig, load_config
from balancer.app.drain_wiring import (
    BalancerLiveness,
    build_drain_marks,
    probe_balancer,
    who_am_i,
)
from balancer.app.self_drain import cannot_drain_by_itself, drain_by_itself
from balancer.core.drain_marks import DrainMark, changed, new_mark
from balancer.core.moves.placement import is_system_namespace
from balancer.kafka.drain_marks import DrainMarksUnavailableError, KafkaDrainMarks
from balancer.kafka.lease import LeaseUnsupportedError
from balancer.pulsar.errors import PulsarAdminError

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers
    from balancer.pulsar.client import PulsarPeerGroup

NAME = "drain"
EXIT_DONE = 0
EXIT_ERROR = 2
EXIT_TIMED_OUT = 3
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_INTERVAL_S = 5.0

Probe = Callable[[BalancerConfig], BalancerLiveness]


class DrainCycle(Protocol):
    """This process's own drain (`balancer.app.self_drain.SelfDrain`): one cycle of the
    controller's drain rules for a cluster while it holds the writer lease, and whether a
    move it sent is not settled yet (unloaded, not owned again: not verified where it
    landed)."""

    def cycle(self, cluster: str) -> None: ...

    def moves_open(self) -> bool: ...


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="mark brokers draining (--undo unmarks, --list shows, --wait blocks until empty)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("brokers", nargs="*", metavar="BROKER", help="broker id host:port")
    parser.add_argument("--config", type=Path, required=True, help="balancer YAML config")
    parser.add_argument(
        "--cluster", metavar="NAME", help="the brokers' cluster (default: the config's first)"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--undo", action="store_true", help="unmark the brokers")
    what.add_argument("--list", action="store_true", help="show the marks (all clusters)")
    what.add_argument(
        "--wait", action="store_true", help="mark, then wait until the brokers own no bundle"
    )
    parser.add_argument(
        "--timeout-s",
        type=non_negative,
        default=DEFAULT_TIMEOUT_S,
        help=f"--wait: give up after this (exit 3; default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--interval-s",
        type=non_negative,
        default=DEFAULT_INTERVAL_S,
        help=f"--wait: seconds between two ownership reads (default {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--journal",
        type=Path,
        metavar="PATH",
        help="--wait with the balancer down: the journal of this command's moves (default: "
        "controller.journal_path; in a broker pod, a file on the pod's disk)",
    )
    parser.add_argument("--by", help="who sets the mark (default: user@host, the pod's name)")
    add_output_argument(parser)
    parser.set_defaults(handler=drain_command)


def drain_command(
    args: argparse.Namespace,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    probe: Probe = probe_balancer,
) -> int:
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())
    config = load_config(args.config)
    cluster = args.cluster or config.clusters[0].name
    config.cluster(cluster)  # LookupError (exit 2) for a cluster the config does not name
    brokers: list[str] = list(dict.fromkeys(args.brokers))
    if not args.list and not brokers:
        raise ValueError("name at least one BROKER (host:port), or give --list")
    try:
        with build_drain_marks(config) as marks:
            marks.refresh()
            if args.list:
                _print_marks(marks.marks(args.cluster), as_json=wants_json(args))
                return EXIT_DONE
            from balancer.app.pulsar_wiring import peer_group_from_config

            with peer_group_from_config(config) as admin:
                listed = set(admin.list_brokers(cluster))
                if args.undo:
                    return _undo(marks, cluster, brokers, listed, by=args.by or who_am_i())
                _mark(marks, cluster, brokers, listed, by=args.by or who_am_i())
                if not args.wait:
                    return EXIT_DONE
                with ExitStack() as stack:
                    liveness = probe(config)
                    print(f"drain: balancer {liveness.state}: {liveness.detail}",
                          file=sys.stderr)  # fmt: skip
                    cycle = _by_itself(stack, config, admin, marks, liveness, args.journal)
                    return _wait(
                        admin, cluster, brokers, cycle,
                        timeout_s=args.timeout_s, interval_s=args.interval_s,
                        sleep=sleep, monotonic=monotonic,
                    )  # fmt: skip
    except (
        DrainMarksUnavailableError, PulsarAdminError, KafkaError, LeaseUnsupportedError,
        sqlite3.Error,
    ) as exc:  # fmt: skip
        # Kafka or Pulsar away or refusing, a journal that cannot be opened (draining by
        # itself): one line, exit 2 (never a traceback).
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _now_ms() -> int:
    return int(time.time() * 1000)


def _not_listed(cluster: str, brokers: Sequence[str], listed: set[str]) -> ValueError:
    return ValueError(
        f"cluster {cluster} does not list {', '.join(brokers)} (it lists "
        f"{', '.join(sorted(listed)) or 'no broker'}); a broker is named host:port as "
        f"GET /admin/v2/brokers/{cluster} lists it"
    )


def _mark(
    marks: KafkaDrainMarks, cluster: str, brokers: Sequence[str], listed: set[str], *, by: str
) -> None:
    unknown = [b for b in brokers if b not in listed]
    if unknown:
        raise _not_listed(cluster, unknown, listed)
    current = {m.broker: m for m in marks.marks(cluster)}
    now_ms = _now_ms()
    new: list[DrainMark] = []
    for broker in brokers:
        mark = current.get(broker)
        if mark is not None and mark.state == "draining":
            print(f"{cluster}/{broker}: already draining (marked by {mark.marked_by} "
                  f"at {_when(mark.marked_at_ms)})", file=sys.stderr)  # fmt: skip
            continue
        new.append(new_mark(cluster, broker, by=by, at_ms=now_ms))
    marks.write(new)
    for mark in new:
        print(f"{cluster}/{mark.broker}: marked draining by {by}", file=sys.stderr)


def _undo(
    marks: KafkaDrainMarks, cluster: str, brokers: Sequence[str], listed: set[str], *, by: str
) -> int:
    current = {m.broker: m for m in marks.marks(cluster)}
    # A broker gone for good (scaled in) may still be unmarked; one neither listed nor
    # marked is a typo.
    unknown = [b for b in brokers if b not in listed and b not in current]
    if unknown:
        raise _not_listed(cluster, unknown, listed)
    now_ms = _now_ms()
    cleared = [
        changed(current[b], "cleared", by=by, at_ms=now_ms)
        for b in brokers
        if b in current and current[b].draining
    ]
    marks.write(cleared)
    done = {m.broker for m in cleared}
    for broker in brokers:
        said = "unmarked" if broker in done else "was not marked"
        print(f"{cluster}/{broker}: {said}", file=sys.stderr)
    return EXIT_DONE


def _by_itself(
    stack: ExitStack,
    config: BalancerConfig,
    admin: PulsarPeerGroup,
    marks: KafkaDrainMarks,
    liveness: BalancerLiveness,
    journal: Path | None,
) -> DrainCycle | None:
    """With no balancer holding the writer lease, this command's own drain cycle (it takes
    the lease and acts while it holds it); else None: the balancer drains, this waits."""
    if liveness.state != "down":
        return None
    why = cannot_drain_by_itself(config)
    if why is not None:
        print(f"drain: no balancer is running and this command cannot drain by itself ({why}): "
              "the brokers empty only once a balancer runs again", file=sys.stderr)  # fmt: skip
        return None
    return stack.enter_context(drain_by_itself(config, admin, marks, journal_path=journal))


def _wait(
    admin: PulsarPeerGroup,
    cluster: str,
    brokers: Sequence[str],
    cycle: DrainCycle | None,
    *,
    timeout_s: float,
    interval_s: float,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> int:
    deadline = monotonic() + timeout_s
    left: dict[str, tuple[str, ...]] = {}
    failure: str | None = None
    while True:
        if cycle is not None:
            cycle.cycle(cluster)
        try:
            left = {b: _bundles_left(admin, cluster, b) for b in brokers}
            failure = None
        except Exception as exc:  # a slow or restarting broker: read again until the timeout
            failure = f"{type(exc).__name__}: {exc}"
            print(f"drain: ownership not read ({failure}); reading again", file=sys.stderr)
        # Draining by itself, the command also waits until each move it sent is settled (the
        # bundle owned again, where it landed): the broker is empty once it unloads, but a
        # move is done only once verified.
        settling = cycle is not None and cycle.moves_open()
        if failure is None and not any(left.values()) and not settling:
            print(f"drain: {', '.join(brokers)} own no bundle", file=sys.stderr)
            return EXIT_DONE
        if monotonic() >= deadline:
            break
        sleep(min(interval_s, max(0.0, deadline - monotonic())))
    if failure is None and not any(left.values()):
        # Empty, but a move sent is still not verified where it landed: the broker can stop;
        # the journal keeps the move open for the next process that acts to settle.
        print(f"drain: {', '.join(brokers)} own no bundle; a move this command sent is not "
              "verified yet (settled by the next balancer or drain from its journal)",
              file=sys.stderr)  # fmt: skip
        return EXIT_DONE
    if failure is not None and not left:
        print(f"error: ownership of {', '.join(brokers)} never read: {failure}", file=sys.stderr)
        return EXIT_ERROR
    _print_left(left, timeout_s)
    return EXIT_TIMED_OUT


def _bundles_left(admin: PulsarPeerGroup, cluster: str, broker: str) -> tuple[str, ...]:
    """The bundles `broker` owns that a drain moves: not its heartbeat nor system ones."""
    owned = admin.owned_bundles(cluster, broker)
    return tuple(sorted(name for name, b in owned.items() if not is_system_namespace(b.namespace)))


def _print_left(left: Mapping[str, tuple[str, ...]], timeout_s: float) -> None:
    for broker, bundles in sorted(left.items()):
        if bundles:
            shown = ", ".join(bundles[:20]) + (
                f" and {len(bundles) - 20} more" * (len(bundles) > 20)
            )
            print(f"drain: timed out after {timeout_s:g} s: {broker} still owns "
                  f"{len(bundles)} bundle(s): {shown}")  # fmt: skip


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _print_marks(marks: Sequence[DrainMark], *, as_json: bool) -> None:
    if as_json:
        print_json({"marks": [dict(m.as_record()) for m in marks]})
        return
    rows = [
        (m.cluster, m.broker, m.state, m.marked_by, _when(m.marked_at_ms), m.by, _when(m.at_ms))
        for m in marks
    ]
    columns = ("cluster", "broker", "state", "marked by", "marked at", "last change by", "at")
    print_tables(make_table("Drain marks", columns, rows))
