"""`pulsar-balancer apply PLAN.json`: carry out exactly a plan saved by `plan --save`.

It reads and checks the plan (its content hash, its age: older than
`controller.plan_max_age_s`, or stamped more than a minute ahead of this host's clock, and the
whole plan is refused), shows what it will do and asks (unless `--yes`; with no terminal to
ask and no `--yes` it refuses), then carries out the
selected actions through the controller: allow-list, journal, rate limits (a rate-limited
action waits for its slot), circuit breakers and the writer lease when configured, each
action read back as `run` does. Before each action its premise is read again (the bundle
with the same range, the move's source still owning it, the offload's ledgers still there):
an action whose premise changed is refused and named, never adapted. The plan's age is
checked again once approved and before each action: an action reached after the plan expired
(a late "yes", a long wait for a rate limit) is `expired`, not sent, and so is every one after.
A move whose destination is marked draining (`pulsar-balancer drain`) when it is sent is
refused as stale: the marks are read from Kafka (bounded, `balancer.app.marks_read`) before
the first action and again every few seconds; unknown marks (no Kafka) are said, not waited for.

`apply` acts whatever `controller.mode` says: that key governs `run`, which acts on its own;
the reviewed plan file and `--yes` (or the typed answer) are the approval. `--dry-run`
checks every premise and sends nothing.

Each action's decision id is derived from the plan id and the action, so a second apply of
the same plan sends nothing again (the journal knows it); intents left open by a killed
apply are reconciled from Pulsar's state first, never re-sent. Every audit record of an
action carried out this way has `plan_id`.

Exit codes:
  0  every selected action applied (now, or by an earlier apply of this plan)
  2  error: a bad, tampered or truncated plan file, a config without the plan's clusters,
     no approval, a plan stamped in the future, or an action that failed, stayed unknown
     or was not allowed
  3  some actions refused as stale (listed), or the plan expired (whole, or before some
     actions: those are listed `expired`); the rest applied

    pulsar-balancer apply plan.json --config conf/balancer.yaml
    pulsar-balancer apply plan.json --config conf/balancer.yaml --only split-1 move-2 --yes
    pulsar-balancer apply plan.json --config conf/balancer.yaml --dry-run -o json
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from balancer.app.commands.apply_steps import (
    Item,
    PlannedPoints,
    Status,
    carry_out,
    settle,
    target_of,
)
from balancer.app.commands.output import (
    add_output_argument,
    make_table,
    non_negative,
    print_json,
    print_tables,
    wants_json,
)
from balancer.app.commands.plan_file import config_sha256, describe, heading, read_plan
from balancer.app.config import BalancerConfig, load_config
from balancer.core.plan_document import PlanDocument, PlannedAction, iso_utc

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "apply"
EXIT_APPLIED = 0
EXIT_ERROR = 2
EXIT_STALE = 3
DEFAULT_SETTLE_S = 60.0


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="carry out a plan saved by `plan --save` (asks first; exit 3: some went stale)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("plan", type=Path, metavar="PLAN.json", help="a plan from `plan --save`")
    parser.add_argument(
        "--config", type=Path, help="balancer YAML config (clusters, journal, limits; required)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID",
        help="only these actions (e.g. split-1)",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask: the plan is approved")
    parser.add_argument("--dry-run", action="store_true", help="check every premise, send nothing")
    parser.add_argument(
        "--settle-s",
        type=non_negative,
        default=DEFAULT_SETTLE_S,
        help="how long to recheck moves no broker owns yet before reporting them unknown "
        f"(default {DEFAULT_SETTLE_S:g})",
    )
    add_output_argument(parser)
    parser.set_defaults(handler=apply_command)


def apply_command(
    args: argparse.Namespace,
    *,
    ask: Callable[[str], str] = input,
    is_tty: Callable[[], bool] = lambda: sys.stdin.isatty(),
    sleep: Callable[[float], None] = time.sleep,
    clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> int:
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())
    if args.config is None:
        raise ValueError("give --config FILE: the clusters, journal and limits to apply with")
    doc = read_plan(args.plan)
    config = load_config(args.config)
    now_ms = clock_ms()
    actions = _selected(doc, args.only)
    missing = sorted({a.decision.cluster for a in actions} - {c.name for c in config.clusters})
    if missing:
        raise ValueError(
            f"plan {doc.plan_id} acts on cluster(s) {', '.join(missing)}, which "
            f"{args.config} does not name: apply with the config the plan was made with"
        )
    notes = []
    if doc.config_sha256 != config_sha256(config):
        notes.append(
            f"note: {args.config} differs from the config the plan was made with; the plan's "
            "actions are applied as reviewed, under this config's allow-list and limits"
        )
    max_age_s = config.controller.plan_max_age_s
    refused = _age_refused(doc, now_ms, max_age_s)
    if refused is not None:
        code, why = refused
        return _report(
            args, doc, [], now_ms, notes, code,
            f"{why}: nothing applied; make and review a new plan",
        )  # fmt: skip
    if not wants_json(args):
        _show(doc, actions, now_ms, notes)
    if not actions:
        return _report(args, doc, [], now_ms, notes, EXIT_APPLIED, "nothing to apply")
    if not args.yes and not args.dry_run:
        if not is_tty():
            raise ValueError(
                "no terminal to ask for approval: review the plan, then run apply with --yes"
            )
        answer = ask(f"Apply {len(actions)} action(s) of {doc.plan_id}? Type 'yes' to apply: ")
        if answer.strip().lower() != "yes":
            print("apply: not approved; nothing applied", file=sys.stderr)
            return EXIT_ERROR
        # The answer may come hours later: the plan's age is what it is now.
        approved_ms = clock_ms()
        refused = _age_refused(doc, approved_ms, max_age_s)
        if refused is not None:
            code, why = refused
            return _report(
                args, doc, [], approved_ms, notes, code,
                f"{why} when approved ({(approved_ms - now_ms) / 1000:.0f} s after it was "
                "shown): nothing applied; make and review a new plan",
            )  # fmt: skip

    def fresh() -> str | None:
        return doc.age_refusal(clock_ms(), max_age_s)

    items = _apply(
        config, doc, actions, dry_run=args.dry_run, settle_s=args.settle_s, sleep=sleep,
        fresh=fresh,
    )  # fmt: skip
    chosen = {a.action_id for a in actions}
    items += [
        Item(a, a.for_plan(doc.plan_id).decision_id, Status.NOT_SELECTED)
        for a in doc.actions
        if a.action_id not in chosen
    ]
    return _report(args, doc, items, clock_ms(), notes, _exit_code(items), None)


def _age_refused(doc: PlanDocument, now_ms: int, max_age_s: float) -> tuple[int, str] | None:
    """The exit code and why, when the plan's age forbids acting on it now: expired (3), or
    stamped in the future (2: a clock is wrong, not the plan's premises)."""
    why = doc.age_refusal(now_ms, max_age_s)
    if why is None:
        return None
    return (EXIT_ERROR if doc.age_s(now_ms) < 0 else EXIT_STALE), why


def _selected(doc: PlanDocument, only: list[str]) -> list[PlannedAction]:
    if not only:
        return list(doc.actions)
    known = {a.action_id for a in doc.actions}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise ValueError(
            f"--only {' '.join(unknown)}: not in plan {doc.plan_id} (its actions: "
            f"{', '.join(a.action_id for a in doc.actions) or 'none'})"
        )
    return [a for a in doc.actions if a.action_id in set(only)]


def _apply(
    config: BalancerConfig,
    doc: PlanDocument,
    actions: list[PlannedAction],
    *,
    dry_run: bool,
    settle_s: float,
    sleep: Callable[[float], None],
    fresh: Callable[[], str | None],
) -> list[Item]:
    from balancer.app.controller_wiring import build_controller
    from balancer.app.marks_read import ApplyMarks
    from balancer.app.pulsar_wiring import peer_group_from_config

    # The reviewed plan is the approval: act whatever `controller.mode` (run's switch) says.
    acting = config.model_copy(
        update={"controller": config.controller.model_copy(update={"mode": "apply"})}
    )
    # A destination marked draining since the plan was saved is refused at send time (stale).
    marks = ApplyMarks(config)
    if marks.last.marks is None:
        print(f"apply: {marks.last.note}: a move to a broker marked draining is not refused",
              file=sys.stderr)  # fmt: skip
    lease = _lease(acting) if not dry_run else None
    points = PlannedPoints()
    try:
        with peer_group_from_config(config) as admin:
            controller = build_controller(
                acting, admin, lease=lease, audit_fields={"plan_id": doc.plan_id},
                offload_point=points, role="apply", draining_of=marks.draining,
            )  # fmt: skip
            try:
                if not dry_run:
                    # Intents a killed apply (or run) left open: settled from Pulsar, not re-sent.
                    controller.reconcile()
                items = carry_out(controller, admin, doc, actions, points, dry_run=dry_run,
                                  sleep=sleep, fresh=fresh)  # fmt: skip
                if not dry_run:
                    settle(controller, items, wait_s=settle_s, sleep=sleep)
            finally:
                controller.close()
    finally:
        if lease is not None:
            lease.stop()
    return items


def _lease(config: BalancerConfig) -> Any:
    """The writer lease when configured, held before anything is sent (else an error)."""
    from balancer.app.lease_wiring import build_writer_lease

    lease = build_writer_lease(config)
    if lease is None:
        return None
    lease.start()
    deadline = time.monotonic() + config.controller.writer_lease.lease_s
    while time.monotonic() < deadline:
        if lease.status().held:
            return lease
        time.sleep(0.5)
    status = lease.status()
    lease.stop()
    raise ValueError(
        f"writer lease not held after {config.controller.writer_lease.lease_s:g} s "
        f"(holder: {status.holder or 'unknown'}; {status.detail}): another balancer acts on "
        "these clusters; nothing applied"
    )


def _exit_code(items: list[Item]) -> int:
    statuses = {i.status for i in items}
    if Status.NOT_APPLIED in statuses:
        return EXIT_ERROR
    if Status.STALE in statuses or Status.EXPIRED in statuses:
        return EXIT_STALE
    return EXIT_APPLIED


def _show(doc: PlanDocument, actions: list[PlannedAction], now_ms: int, notes: list[str]) -> None:
    print(heading(doc, now_ms=now_ms))
    for note in notes:
        print(note)
    for a in actions:
        print(f"  {a.action_id}: {describe(a)}")
    sys.stdout.flush()


def _report(
    args: argparse.Namespace,
    doc: PlanDocument,
    items: list[Item],
    now_ms: int,
    notes: list[str],
    code: int,
    message: str | None,
) -> int:
    counts: dict[str, int] = {s.value: 0 for s in Status}
    for i in items:
        counts[i.status.value] += 1
    if wants_json(args):
        print_json({
            "plan_id": doc.plan_id,
            "created_at": iso_utc(doc.created_at_ms),
            "age_s": round(doc.age_s(now_ms), 3),
            "dry_run": bool(args.dry_run),
            "notes": notes,
            "message": message,
            "items": [i.to_dict() for i in items],
            "counts": counts,
            "exit_code": code,
        })  # fmt: skip
        return code
    if message is not None:
        print(f"apply: {message}", file=sys.stderr if code else sys.stdout)
        return code
    print_tables(
        make_table(
            f"Plan {doc.plan_id}: what apply did",
            ("id", "target", "status", "result", "detail"),
            [
                (i.action.action_id, target_of(i.action), i.status.value, i.result, i.detail)
                for i in items
            ],
        )
    )
    stale = [i.action.action_id for i in items if i.status is Status.STALE]
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(f"{summary} (exit code {code})")
    if stale:
        print(f"Refused as stale (premise changed): {', '.join(stale)}: make a new plan for them")
    expired = [i.action.action_id for i in items if i.status is Status.EXPIRED]
    if expired:
        print(f"Not sent, the plan expired first: {', '.join(expired)}: make a new plan for them")
    return code
