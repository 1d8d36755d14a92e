"""A saved plan (`plan --save`, `apply PLAN`): the versioned document, its id and its checks.

The document is JSON: the schema and its version, when and against what it was made (the
clusters, each acted-on namespace's bundle layout as read, each moved bundle's owner, the
config's hash) and every proposed action with the load that justified it. Its id is a hash
of its content, so a changed byte (a hand edit, a truncated copy) is detected: the id no
longer matches. The id is integrity, not authenticity: whoever may write the file may also
recompute it (protect the plan store as the config is protected).

An action applied from a plan gets a decision id derived from the plan id and the action's
id, so the controller's journal recognises a second apply of the same plan.

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from balancer.core.bundles import BundleRange, InvalidBundle, format_position, parse_position
from balancer.core.decisions import (
    OffloadDecision,
    SplitDecision,
    SplitInputs,
    SplitReason,
    stable_id,
)
from balancer.core.limits import BundleLimits
from balancer.core.moves.model import MoveDecision, MoveReason
from balancer.core.offload import LedgerSize, MessageId
from balancer.core.split import ChildLoad, SplitAlgorithm

SCHEMA = "pulsar-balancer-plan"
# 2: each split says whether its children are unloaded (`unload_children`). A version-1 plan
# is still read: see `_split_unload`.
VERSION = 2
READABLE_VERSIONS = (1, 2)
# How far ahead of this host's clock a plan's stamp may be (the host that made it may run a
# little ahead): beyond that its age cannot be known and the plan is refused.
PLAN_CLOCK_SKEW_S = 60.0
PlannedDecision = SplitDecision | OffloadDecision | MoveDecision


class PlanFileError(ValueError):
    """A plan document that cannot be used: its message is one line."""


@dataclass(frozen=True, slots=True)
class PlannedAction:
    action_id: str  # `split-1`, `offload-2`, `move-3`: what `apply --only` names
    decision: PlannedDecision  # as planned (its decision id is the plan's window id)
    offload_point: MessageId | None = None  # offloads: every ledger before its ledger goes

    @property
    def kind(self) -> str:
        return self.action_id.split("-", 1)[0]

    def for_plan(self, plan_id: str) -> PlannedDecision:
        """The decision to apply: its id derived from the plan and the action."""
        return replace(self.decision, decision_id=stable_id(self.kind, plan_id, self.action_id))


@dataclass(frozen=True, slots=True)
class PlanDocument:
    plan_id: str
    created_at_ms: int
    config_sha256: str
    source: str
    clusters: tuple[str, ...]
    layouts: Mapping[tuple[str, str], tuple[int, ...]]  # (cluster, namespace) -> boundaries
    owners: Mapping[tuple[str, str], str]  # (cluster, `tenant/ns/0x.._0x..`) -> broker
    actions: tuple[PlannedAction, ...]

    def age_s(self, now_ms: int) -> float:
        return (now_ms - self.created_at_ms) / 1000

    def age_refusal(self, now_ms: int, max_age_s: float) -> str | None:
        """Why the plan may not be acted on at `now_ms` (None: it may): older than
        `max_age_s`, or stamped more than PLAN_CLOCK_SKEW_S in the future."""
        age_s = self.age_s(now_ms)
        if age_s < -PLAN_CLOCK_SKEW_S:
            return (
                f"plan {self.plan_id} is stamped {iso_utc(self.created_at_ms)}, {-age_s:.0f} s "
                f"ahead of this host's clock (more than the {PLAN_CLOCK_SKEW_S:g} s two clocks "
                "may differ): its age cannot be known; check the clocks of the host that made "
                "it and of this one"
            )
        if age_s > max_age_s:
            return (
                f"plan {self.plan_id} expired: made {iso_utc(self.created_at_ms)}, "
                f"{age_s:.0f} s ago, older than controller.plan_max_age_s ({max_age_s:g} s)"
            )
        return None


def content_hash(body: Mapping[str, Any]) -> str:
    """sha256 of the document without its own id fields, keys sorted, no spaces."""
    rest = {k: v for k, v in body.items() if k not in ("plan_id", "content_sha256")}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_id_of(digest: str) -> str:
    return f"plan-{digest[:16]}"


def iso_utc(ms: int) -> str:
    """`2026-11-28T15:30:00.123Z` without a clock or time zone database."""
    days, rest_ms = divmod(ms, 86_400_000)
    # Howard Hinnant's civil_from_days: the proleptic Gregorian date of a day count.
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    hours, rest_ms = divmod(rest_ms, 3_600_000)
    minutes, rest_ms = divmod(rest_ms, 60_000)
    seconds, millis = divmod(rest_ms, 1000)
    return f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}Z"


def build_document(
    *,
    created_at_ms: int,
    config_sha256: str,
    source: str,
    clusters: Sequence[str],
    layouts: Mapping[tuple[str, str], Sequence[int]],
    splits: Sequence[SplitDecision],
    offloads: Sequence[tuple[OffloadDecision, MessageId]],
    moves: Sequence[MoveDecision],
) -> dict[str, Any]:
    """The plan as a JSON-ready document, with its content hash and id. Each split must say
    whether its children are unloaded (`unload_children` not None): `apply` sends exactly
    that, whatever its own config says."""
    actions: list[dict[str, Any]] = []
    for i, s in enumerate(splits, 1):
        if s.unload_children is None:
            raise ValueError(f"split {s.decision_id}: unload_children must be decided to save it")
        actions.append({"id": f"split-{i}", **s.to_dict(), "unload_children": s.unload_children})
    for i, (o, point) in enumerate(offloads, 1):
        actions.append({"id": f"offload-{i}", **o.to_dict(), "offload_point": point.to_json()})
    for i, m in enumerate(moves, 1):
        actions.append({"id": f"move-{i}", **m.to_dict()})
    namespaces = {(str(a["cluster"]), str(a["namespace"])) for a in actions}
    body: dict[str, Any] = {
        "schema": SCHEMA,
        "version": VERSION,
        "created_at": iso_utc(created_at_ms),
        "created_at_ms": created_at_ms,
        "config_sha256": config_sha256,
        "source": source,
        "clusters": list(clusters),
        "layouts": [
            {
                "cluster": c,
                "namespace": n,
                "boundaries": [format_position(b) for b in layouts[(c, n)]],
            }
            for c, n in sorted(namespaces)
            if (c, n) in layouts
        ],
        "owners": [
            {"cluster": m.cluster, "bundle": m.bundle.key(m.namespace), "broker": m.source}
            for m in moves
        ],
        "actions": actions,
    }
    digest = content_hash(body)
    return {"plan_id": plan_id_of(digest), "content_sha256": digest, **body}


# --- reading ---------------------------------------------------------------------------------


def parse_document(body: object) -> PlanDocument:
    """The document, checked: schema, version, hash, every field's type. PlanFileError
    (one line) for anything else."""
    if not isinstance(body, dict):
        raise PlanFileError("not a plan: the document is not a JSON object")
    if body.get("schema") != SCHEMA:
        raise PlanFileError(f"not a plan: schema is {body.get('schema')!r}, not {SCHEMA!r}")
    if body.get("version") not in READABLE_VERSIONS:
        raise PlanFileError(
            f"plan version {body.get('version')!r} is not supported (this balancer reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))}): make the plan again with "
            "this version"
        )
    digest = content_hash(body)
    if body.get("content_sha256") != digest or body.get("plan_id") != plan_id_of(digest):
        raise PlanFileError(
            f"plan {body.get('plan_id')!r} was changed after it was made (its content hash "
            "no longer matches): make and review a new plan"
        )
    try:
        return _document(body)
    except (KeyError, TypeError, ValueError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise PlanFileError(f"plan {body['plan_id']}: malformed: {what}") from None


def _document(body: dict[str, Any]) -> PlanDocument:
    actions: list[PlannedAction] = []
    seen: set[str] = set()
    raws = _list(body, "actions")
    moved = {str(r.get("cluster")) for r in raws if isinstance(r, dict) and r.get("kind") == "move"}
    for raw in raws:
        action = _action(raw)
        if action.action_id in seen:
            raise ValueError(f"action id {action.action_id} appears twice")
        seen.add(action.action_id)
        if isinstance(action.decision, SplitDecision):
            unload = _split_unload(raw, body["version"], moved)
            action = replace(action, decision=replace(action.decision, unload_children=unload))
        actions.append(action)
    return PlanDocument(
        plan_id=str(body["plan_id"]),
        created_at_ms=_int(body, "created_at_ms"),
        config_sha256=str(body["config_sha256"]),
        source=str(body["source"]),
        clusters=tuple(str(c) for c in _list(body, "clusters")),
        layouts={
            (str(x["cluster"]), str(x["namespace"])): tuple(
                parse_position(b) for b in x["boundaries"]
            )
            for x in _list(body, "layouts")
        },
        owners={
            (str(x["cluster"]), str(x["bundle"])): str(x["broker"]) for x in _list(body, "owners")
        },
        actions=tuple(actions),
    )


def _action(raw: Any) -> PlannedAction:
    if not isinstance(raw, dict):
        raise ValueError("an action is not a JSON object")
    action_id = str(raw["id"])
    kind = raw["kind"]
    if kind == "split" and action_id.startswith("split-"):
        return PlannedAction(action_id, _split(raw))
    if kind == "offload" and action_id.startswith("offload-"):
        point = raw["offload_point"]
        return PlannedAction(
            action_id,
            _offload(raw),
            MessageId(
                _int(point, "ledgerId"),
                _int(point, "entryId"),
                int(point.get("partitionIndex", -1)),
            ),
        )
    if kind == "move" and action_id.startswith("move-"):
        return PlannedAction(action_id, _move(raw))
    raise ValueError(f"action {action_id}: unknown kind {kind!r}")


def _split(raw: dict[str, Any]) -> SplitDecision:
    inputs = raw["inputs"]
    limits = inputs["limits"]
    return SplitDecision(
        decision_id=str(raw["decision_id"]),
        cluster=str(raw["cluster"]),
        namespace=str(raw["namespace"]),
        bundle=_bundle(raw["bundle"]),
        algorithm=SplitAlgorithm(raw["algorithm"]),
        boundaries=tuple(parse_position(b) for b in raw["boundaries"]),
        children=tuple(
            ChildLoad(
                _bundle(c["bundle"]),
                int(c["topics"]),
                float(c["msg_rate"]),
                float(c["throughput_bytes"]),
                int(c["sessions"]),
            )
            for c in raw["children"]
        ),
        reasons=tuple(SplitReason(r) for r in raw["reasons"]) or (SplitReason.UNKNOWN,),
        window_end_ms=_int(raw, "window_end_ms"),
        inputs=SplitInputs(
            msg_rate=float(inputs["msg_rate"]),
            throughput_bytes=float(inputs["throughput_bytes"]),
            topic_count=int(inputs["topic_count"]),
            session_count=int(inputs["session_count"]),
            completeness=float(inputs["completeness"]),
            hit_count=int(inputs["hit_count"]),
            limits=BundleLimits(
                max_topics=int(limits["max_topics"]),
                max_sessions=int(limits["max_sessions"]),
                max_msg_rate=float(limits["max_msg_rate"]),
                max_bandwidth_mbytes=float(limits["max_bandwidth_mbytes"]),
            ),
            bundles_in_namespace=int(inputs["bundles_in_namespace"]),
            max_bundles=int(inputs["max_bundles"]),
        ),
    )


def _split_unload(raw: dict[str, Any], version: int, moved_clusters: set[str]) -> bool | None:
    """Whether a split's children are unloaded after it (None: as the applying controller's
    `controller.unload_after_split` says). Version 2 says it (`unload_children`). A version-1
    plan did not: its children stay on the parent's broker when the plan moves bundles of the
    split's cluster (it was planned with a move plan there, which counted them on the
    parent's broker and may move some: unloaded, those moves would find them gone), else
    they go as the config says (what a version-1 apply did)."""
    if version >= 2:
        value = raw["unload_children"]
        if not isinstance(value, bool):
            raise ValueError(f"unload_children must be true or false, not {value!r}")
        return value
    return False if str(raw["cluster"]) in moved_clusters else None


def _offload(raw: dict[str, Any]) -> OffloadDecision:
    return OffloadDecision(
        decision_id=str(raw["decision_id"]),
        cluster=str(raw["cluster"]),
        namespace=str(raw["namespace"]),
        topic=str(raw["topic"]),
        storage_size_bytes=_int(raw, "storage_size_bytes"),
        offloaded_size_bytes=_int(raw, "offloaded_size_bytes"),
        threshold_bytes=_int(raw, "threshold_bytes"),
        window_end_ms=_int(raw, "window_end_ms"),
    )


def _move(raw: dict[str, Any]) -> MoveDecision:
    return MoveDecision(
        decision_id=str(raw["decision_id"]),
        cluster=str(raw["cluster"]),
        namespace=str(raw["namespace"]),
        bundle=_bundle(raw["bundle"]),
        source=str(raw["source"]),
        destination=str(raw["destination"]),
        reason=MoveReason(raw["reason"]),
        bundle_load_ratio=float(raw["bundle_load_ratio"]),
        msg_rate=float(raw["msg_rate"]),
        throughput_bytes=float(raw["throughput_bytes"]),
        sessions=int(raw["sessions"]),
        source_load_before=float(raw["source_load_before"]),
        source_load_after=float(raw["source_load_after"]),
        destination_load_before=float(raw["destination_load_before"]),
        destination_load_after=float(raw["destination_load_after"]),
        window_end_ms=_int(raw, "window_end_ms"),
        after_split=None if raw.get("after_split") is None else str(raw["after_split"]),
    )


def _bundle(text: object) -> BundleRange:
    if not isinstance(text, str):
        raise InvalidBundle(f"invalid bundle range {text!r}")
    return BundleRange.parse(text)


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, not {value!r}")
    return value


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj[key]
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a JSON array")
    return value


# --- premises --------------------------------------------------------------------------------


def offload_premise(ledgers: Sequence[LedgerSize], point: MessageId) -> str | None:
    """Why an offload up to `point` no longer holds (None: it holds): the point's ledger
    must still be there, with a ledger before it not offloaded yet (what the offload moves)."""
    ids = [lg.ledger_id for lg in ledgers]
    if point.ledger_id not in ids:
        return f"ledger {point.ledger_id} (the offload point) is no longer in the topic"
    before = ledgers[: ids.index(point.ledger_id)]
    if not any(not lg.offloaded for lg in before):
        return f"every ledger before {point.ledger_id} is already offloaded (or trimmed)"
    return None
