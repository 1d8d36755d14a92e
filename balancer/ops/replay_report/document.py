"""The replay report as JSON (`replay --output json`): every figure of the summary, then the
whole `ReplayResult` it was computed from, so a saved report can be drawn again
(`from_json`) or compared by a script.

The document is versioned (`version`); a reader refuses a version it does not know with a
clear error rather than misreading it. Loads are written as JSON numbers; a NaN or infinite
load is refused when writing (strict JSON has no spelling for it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal, TypedDict, cast

from balancer.core.replay.result import (
    ActionKind,
    PolicyRun,
    ReplayAction,
    ReplayResult,
    WindowSample,
)
from balancer.core.replay.summary import (
    HourDifference,
    Overload,
    PolicySummary,
    ReactionFigures,
    ReplaySummary,
    summarize,
)

SCHEMA = "pulsar-balancer/replay-report"
VERSION = 1
READABLE_VERSIONS = (1,)


class ReplayReportError(ValueError):
    """A report document that cannot be read: what is wrong, and where."""


# --- The result, as recorded -------------------------------------------------------------


class ActionDoc(TypedDict):
    at_ms: int
    cluster: str
    kind: str  # split, move, offload
    subject: str
    source_broker: str | None
    destination_broker: str | None
    children: list[str]
    sessions_moved: int
    reason: str


class WindowDoc(TypedDict):
    window_end_ms: int
    broker_load: dict[str, float]  # `cluster/broker` -> load ratio
    bundles_over: dict[str, float]  # `cluster/tenant/ns/range` -> ratio of its limit
    bundles: int


class PolicyRunDoc(TypedDict):
    policy: str
    description: str
    actions: list[ActionDoc]
    windows: list[WindowDoc]


class ResultDoc(TypedDict):
    source: str
    start_ms: int
    end_ms: int
    window_s: int
    clusters: list[str]
    topics: int
    samples: int
    samples_rejected: dict[str, int]
    samples_late: int
    gaps_ms: list[list[int]]  # [first window end, last window end] of each gap
    runs: list[PolicyRunDoc]


# --- The figures -------------------------------------------------------------------------


class OverloadDoc(TypedDict):
    subject_kind: str  # bundle or broker
    subject: str
    start_ms: int
    last_ms: int
    recovered_ms: int | None
    peak: float
    first_action_ms: int | None
    time_to_action_s: float | None


class ReactionDoc(TypedDict):
    overloads: int
    acted_on: int
    never_acted_on: int
    median_time_to_action_s: float | None
    max_time_to_action_s: float | None


class PolicySummaryDoc(TypedDict):
    policy: str
    description: str
    splits: int
    moves: int
    offloads: int
    sessions_moved: int
    bundle_minutes_over: float
    broker_minutes_over: float
    peak_broker_load: float
    bundles_at_end: int
    bundle_reaction: ReactionDoc
    broker_reaction: ReactionDoc
    overloads: list[OverloadDoc]


class HourFiguresDoc(TypedDict):
    policy: str
    bundle_minutes_over: float
    broker_minutes_over: float
    actions: int


class HourDifferenceDoc(TypedDict):
    hour_start_ms: int
    score: float
    per_policy: list[HourFiguresDoc]


class SummaryDoc(TypedDict):
    policies: list[PolicySummaryDoc]
    top_hours: list[HourDifferenceDoc]


class ReportDocument(TypedDict):
    schema: Literal["pulsar-balancer/replay-report"]
    version: int
    summary: SummaryDoc
    result: ResultDoc


# --- Writing -----------------------------------------------------------------------------


def to_document(result: ReplayResult, summary: ReplaySummary | None = None) -> ReportDocument:
    return ReportDocument(
        schema="pulsar-balancer/replay-report",
        version=VERSION,
        summary=summary_doc(summary if summary is not None else summarize(result)),
        result=result_doc(result),
    )


def to_json(result: ReplayResult, summary: ReplaySummary | None = None, indent: int = 1) -> str:
    return json.dumps(to_document(result, summary), indent=indent, allow_nan=False)


def result_doc(result: ReplayResult) -> ResultDoc:
    return ResultDoc(
        source=result.source,
        start_ms=result.start_ms,
        end_ms=result.end_ms,
        window_s=result.window_s,
        clusters=list(result.clusters),
        topics=result.topics,
        samples=result.samples,
        samples_rejected=dict(result.samples_rejected),
        samples_late=result.samples_late,
        gaps_ms=[[first, last] for first, last in result.gaps_ms],
        runs=[_run_doc(run) for run in result.runs],
    )


def _run_doc(run: PolicyRun) -> PolicyRunDoc:
    return PolicyRunDoc(
        policy=run.policy,
        description=run.description,
        actions=[
            ActionDoc(
                at_ms=a.at_ms,
                cluster=a.cluster,
                kind=a.kind.value,
                subject=a.subject,
                source_broker=a.source_broker,
                destination_broker=a.destination_broker,
                children=list(a.children),
                sessions_moved=a.sessions_moved,
                reason=a.reason,
            )
            for a in run.actions
        ],
        windows=[
            WindowDoc(
                window_end_ms=w.window_end_ms,
                broker_load=dict(w.broker_load),
                bundles_over=dict(w.bundles_over),
                bundles=w.bundles,
            )
            for w in run.windows
        ],
    )


def _reaction_doc(r: ReactionFigures) -> ReactionDoc:
    return ReactionDoc(
        overloads=r.overloads,
        acted_on=r.acted_on,
        never_acted_on=r.never_acted_on,
        median_time_to_action_s=r.median_time_to_action_s,
        max_time_to_action_s=r.max_time_to_action_s,
    )


def _overload_doc(o: Overload) -> OverloadDoc:
    return OverloadDoc(
        subject_kind=o.subject_kind,
        subject=o.subject,
        start_ms=o.start_ms,
        last_ms=o.last_ms,
        recovered_ms=o.recovered_ms,
        peak=o.peak,
        first_action_ms=o.first_action_ms,
        time_to_action_s=o.time_to_action_s,
    )


def _policy_doc(p: PolicySummary) -> PolicySummaryDoc:
    return PolicySummaryDoc(
        policy=p.policy,
        description=p.description,
        splits=p.splits,
        moves=p.moves,
        offloads=p.offloads,
        sessions_moved=p.sessions_moved,
        bundle_minutes_over=p.bundle_minutes_over,
        broker_minutes_over=p.broker_minutes_over,
        peak_broker_load=p.peak_broker_load,
        bundles_at_end=p.bundles_at_end,
        bundle_reaction=_reaction_doc(p.bundle_reaction),
        broker_reaction=_reaction_doc(p.broker_reaction),
        overloads=[_overload_doc(o) for o in p.overloads],
    )


def _hour_doc(h: HourDifference) -> HourDifferenceDoc:
    return HourDifferenceDoc(
        hour_start_ms=h.hour_start_ms,
        score=h.score,
        per_policy=[
            HourFiguresDoc(
                policy=c.policy,
                bundle_minutes_over=c.bundle_minutes_over,
                broker_minutes_over=c.broker_minutes_over,
                actions=c.actions,
            )
            for c in h.per_policy
        ],
    )


def summary_doc(summary: ReplaySummary) -> SummaryDoc:
    return SummaryDoc(
        policies=[_policy_doc(p) for p in summary.policies],
        top_hours=[_hour_doc(h) for h in summary.top_hours],
    )


# --- Reading -----------------------------------------------------------------------------


def from_json(text: str | bytes) -> ReplayResult:
    """The `ReplayResult` of a report document (its figures are recomputed from it: they
    are a function of the result). ReplayReportError says what is wrong with a bad one."""
    try:
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReplayReportError(f"replay report is not JSON: {exc}") from exc
    top = _obj(body, "document")
    if top.get("schema") != SCHEMA:
        raise ReplayReportError(
            f"not a replay report: schema {top.get('schema')!r}, not {SCHEMA!r}"
        )
    if top.get("version") not in READABLE_VERSIONS:
        raise ReplayReportError(
            f"replay report version {top.get('version')!r} is not supported (this balancer "
            f"reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    return result_from_doc(_obj(top.get("result"), "result"))


def result_from_doc(doc: Mapping[str, object]) -> ReplayResult:
    runs = _list(doc.get("runs"), "result.runs")
    gaps = _list(doc.get("gaps_ms", []), "result.gaps_ms")
    return ReplayResult(
        source=_str(doc, "source", "result"),
        start_ms=_int(doc, "start_ms", "result"),
        end_ms=_int(doc, "end_ms", "result"),
        window_s=_int(doc, "window_s", "result"),
        clusters=tuple(_str_items(doc.get("clusters"), "result.clusters")),
        topics=_int(doc, "topics", "result"),
        samples=_int(doc, "samples", "result"),
        samples_rejected=_int_map(doc.get("samples_rejected"), "result.samples_rejected"),
        samples_late=_int(doc, "samples_late", "result"),
        runs=tuple(
            _run_from(_obj(r, f"result.runs[{i}]"), f"result.runs[{i}]") for i, r in enumerate(runs)
        ),
        gaps_ms=tuple(_gap_from(g, f"result.gaps_ms[{i}]") for i, g in enumerate(gaps)),
    )


def _run_from(doc: Mapping[str, object], where: str) -> PolicyRun:
    actions = _list(doc.get("actions"), f"{where}.actions")
    windows = _list(doc.get("windows"), f"{where}.windows")
    return PolicyRun(
        policy=_str(doc, "policy", where),
        description=_str(doc, "description", where),
        actions=tuple(
            _action_from(_obj(a, f"{where}.actions[{i}]"), f"{where}.actions[{i}]")
            for i, a in enumerate(actions)
        ),
        windows=tuple(
            _window_from(_obj(w, f"{where}.windows[{i}]"), f"{where}.windows[{i}]")
            for i, w in enumerate(windows)
        ),
    )


def _action_from(doc: Mapping[str, object], where: str) -> ReplayAction:
    kind = _str(doc, "kind", where)
    try:
        action_kind = ActionKind(kind)
    except ValueError:
        raise ReplayReportError(
            f"{where}.kind: {kind!r} is not one of {', '.join(k.value for k in ActionKind)}"
        ) from None
    return ReplayAction(
        at_ms=_int(doc, "at_ms", where),
        cluster=_str(doc, "cluster", where),
        kind=action_kind,
        subject=_str(doc, "subject", where),
        source_broker=_opt_str(doc, "source_broker", where),
        destination_broker=_opt_str(doc, "destination_broker", where),
        children=tuple(_str_items(doc.get("children", []), f"{where}.children")),
        sessions_moved=_int(doc, "sessions_moved", where),
        reason=_str(doc, "reason", where),
    )


def _window_from(doc: Mapping[str, object], where: str) -> WindowSample:
    return WindowSample(
        window_end_ms=_int(doc, "window_end_ms", where),
        broker_load=_float_map(doc.get("broker_load"), f"{where}.broker_load"),
        bundles_over=_float_map(doc.get("bundles_over", {}), f"{where}.bundles_over"),
        bundles=_int(doc, "bundles", where),
    )


def _gap_from(value: object, where: str) -> tuple[int, int]:
    items = _list(value, where)
    if len(items) != 2 or not all(_is_int(v) for v in items):
        raise ReplayReportError(f"{where}: expected [first_ms, last_ms], got {value!r}")
    return cast(int, items[0]), cast(int, items[1])


# --- Field checks (a bad document is an error naming the field, never a crash) ------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _obj(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ReplayReportError(f"{where}: expected an object, got {type(value).__name__}")
    return cast(Mapping[str, object], value)


def _list(value: object, where: str) -> list[object]:
    if not isinstance(value, list):
        raise ReplayReportError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _int(doc: Mapping[str, object], key: str, where: str) -> int:
    value = doc.get(key)
    if not _is_int(value):
        raise ReplayReportError(f"{where}.{key}: expected an integer, got {value!r}")
    return cast(int, value)


def _str(doc: Mapping[str, object], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise ReplayReportError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _opt_str(doc: Mapping[str, object], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise ReplayReportError(f"{where}.{key}: expected a string or null, got {value!r}")
    return value


def _str_items(value: object, where: str) -> list[str]:
    items = _list(value, where)
    if not all(isinstance(v, str) for v in items):
        raise ReplayReportError(f"{where}: expected strings, got {value!r}")
    return cast(list[str], items)


def _int_map(value: object, where: str) -> dict[str, int]:
    doc = _obj(value, where)
    return {k: _int(doc, k, where) for k in doc}


def _float_map(value: object, where: str) -> dict[str, float]:
    doc = _obj(value, where)
    out: dict[str, float] = {}
    for key, number in doc.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ReplayReportError(f"{where}.{key}: expected a number, got {number!r}")
        out[key] = float(number)
    return out
