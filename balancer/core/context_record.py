"""The context topic's record: one collector round of one cluster, the broker load reports
read in it (`RoundContext`), as JSON both ways.

The collector publishes one per round and cluster when it reads load reports (moves on),
keyed by the cluster, stamped with the round's time; the replay reads them back for the
bundle layout, the owners and the brokers' recorded load (docs/events.md#context-record).

Wire format, version 1 (`"v": 1`), every field of `BrokerLoadReport`:

    {"v":1,"cluster":"a","round_ms":1700000040000,"reports":[{"cluster":"a",
     "broker":"b1:8080","timestamp_ms":1700000041234,
     "resources":{"cpu":{"usage":55.0,"limit":100.0}, ...},
     "msg_rate_in":..., "msg_rate_out":..., "msg_throughput_in":..., "msg_throughput_out":...,
     "num_topics":..., "num_bundles":..., "num_producers":..., "num_consumers":...,
     "bundles":["tenant/ns/0x00000000_0x40000000", ...],
     "last_update_ms":..., "origin":"load_report"}]}

Nothing in it is a secret: broker ids, bundle names and figures. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Final, TypedDict, cast

from balancer.core.broker_load import BrokerLoadReport, LoadSource, Resource, ResourceUsage
from balancer.core.replay.recording import RoundContext

CONTEXT_RECORD_VERSION: Final = 1


class ContextRejectReason(StrEnum):
    """Why a context record is skipped (counted by reason, never a crash)."""

    BAD_JSON = "bad_json"  # not UTF-8 JSON
    WRONG_VERSION = "wrong_version"  # `v` missing or not a version this reader knows
    WRONG_SHAPE = "wrong_shape"  # a field missing or of the wrong type
    BAD_VALUE = "bad_value"  # an unknown resource or origin, a report of another cluster
    OUT_OF_ORDER = "out_of_order"  # a round older than one already read (the reader's check)


class ContextPublishFailure(StrEnum):
    """Why the collector could not publish a round's context record (counted by reason in
    `pulsar_balancer_collector_context_publish_failures_total`, each logged)."""

    TOO_LARGE = "too_large"  # over the producer's or the broker's record size
    SEND_FAILED = "send_failed"  # not handed to Kafka (no producer, no metadata in time)
    NOT_DELIVERED = "not_delivered"  # handed over, Kafka did not take it
    INVALID_REPORT = "invalid_report"  # a load report's figure JSON cannot hold (NaN, inf)


class ContextRecordError(ValueError):
    def __init__(self, reason: ContextRejectReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class UsageJson(TypedDict):
    usage: float
    limit: float


class ReportJson(TypedDict):
    cluster: str
    broker: str
    timestamp_ms: int
    resources: dict[str, UsageJson]
    msg_rate_in: float
    msg_rate_out: float
    msg_throughput_in: float
    msg_throughput_out: float
    num_topics: int
    num_bundles: int
    num_producers: int
    num_consumers: int
    bundles: list[str]
    last_update_ms: int
    origin: str


class ContextJson(TypedDict):
    v: int
    cluster: str
    round_ms: int
    reports: list[ReportJson]


def context_key(cluster: str) -> bytes:
    """The record's Kafka key: its cluster (one cluster's rounds stay in one partition)."""
    return cluster.encode()


def encode_context(context: RoundContext) -> bytes:
    """The record of one round (compact JSON, UTF-8). Raises ValueError for a figure that is
    not finite (JSON has no NaN: the record would be unreadable)."""
    body: ContextJson = {
        "v": CONTEXT_RECORD_VERSION,
        "cluster": context.cluster,
        "round_ms": int(context.round_ms),
        "reports": [_report_json(r) for r in context.reports],
    }
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def _report_json(report: BrokerLoadReport) -> ReportJson:
    return {
        "cluster": report.cluster,
        "broker": report.broker,
        "timestamp_ms": int(report.timestamp_ms),
        "resources": {
            str(r.value): {"usage": u.usage, "limit": u.limit}
            for r, u in sorted(report.resources.items())
        },
        "msg_rate_in": report.msg_rate_in,
        "msg_rate_out": report.msg_rate_out,
        "msg_throughput_in": report.msg_throughput_in,
        "msg_throughput_out": report.msg_throughput_out,
        "num_topics": report.num_topics,
        "num_bundles": report.num_bundles,
        "num_producers": report.num_producers,
        "num_consumers": report.num_consumers,
        "bundles": list(report.bundles),
        "last_update_ms": int(report.last_update_ms),
        "origin": str(report.origin.value),
    }


def decode_context(raw: bytes) -> RoundContext:
    """The round a record holds; raises ContextRecordError (with its reason) for a bad one."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ContextRecordError(ContextRejectReason.BAD_JSON, str(exc)[:120]) from None
    if not isinstance(obj, dict):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, "a context record is an object")
    version = obj.get("v")
    if version != CONTEXT_RECORD_VERSION or isinstance(version, bool):
        raise ContextRecordError(
            ContextRejectReason.WRONG_VERSION,
            f"version {version!r}; this reader knows {CONTEXT_RECORD_VERSION}",
        )
    body = cast(ContextJson, obj)
    cluster = _str(body, "cluster")
    round_ms = _int(body, "round_ms")
    reports_json = body.get("reports")
    if not isinstance(reports_json, list):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, "reports must be a list")
    reports = tuple(_report(item, cluster) for item in reports_json)
    return RoundContext(cluster=cluster, round_ms=round_ms, reports=reports)


def _report(item: object, cluster: str) -> BrokerLoadReport:
    if not isinstance(item, dict):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, "a report must be an object")
    body = cast(ReportJson, item)
    if _str(body, "cluster") != cluster:
        raise ContextRecordError(
            ContextRejectReason.BAD_VALUE,
            f"a report of cluster {body['cluster']!r} in a record of {cluster!r}",
        )
    resources_json = body.get("resources")
    if not isinstance(resources_json, dict):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, "resources must be an object")
    resources: dict[Resource, ResourceUsage] = {}
    for name, usage in resources_json.items():
        try:
            resource = Resource(name)
        except ValueError:
            raise ContextRecordError(
                ContextRejectReason.BAD_VALUE, f"unknown resource {str(name)[:40]!r}"
            ) from None
        if not isinstance(usage, dict):
            raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, f"resources.{name}")
        resources[resource] = ResourceUsage(
            usage=_float(usage, "usage"), limit=_float(usage, "limit")
        )
    bundles = body.get("bundles")
    if not isinstance(bundles, list) or not all(isinstance(b, str) for b in bundles):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, "bundles must be strings")
    try:
        origin = LoadSource(_str(body, "origin"))
    except ValueError:
        raise ContextRecordError(
            ContextRejectReason.BAD_VALUE, f"unknown origin {str(body['origin'])[:40]!r}"
        ) from None
    return BrokerLoadReport(
        cluster=cluster,
        broker=_str(body, "broker"),
        timestamp_ms=_int(body, "timestamp_ms"),
        resources=resources,
        msg_rate_in=_float(body, "msg_rate_in"),
        msg_rate_out=_float(body, "msg_rate_out"),
        msg_throughput_in=_float(body, "msg_throughput_in"),
        msg_throughput_out=_float(body, "msg_throughput_out"),
        num_topics=_int(body, "num_topics"),
        num_bundles=_int(body, "num_bundles"),
        num_producers=_int(body, "num_producers"),
        num_consumers=_int(body, "num_consumers"),
        bundles=tuple(bundles),
        last_update_ms=_int(body, "last_update_ms"),
        origin=origin,
    )


def _field(body: object, name: str) -> object:
    value = cast(dict[str, object], body).get(name)
    if value is None:
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, f"{name} is missing")
    return value


def _str(body: object, name: str) -> str:
    value = _field(body, name)
    if not isinstance(value, str) or not value:
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, f"{name} must be a string")
    return value


def _int(body: object, name: str) -> int:
    value = _field(body, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, f"{name} must be an integer")
    return value


def _float(body: object, name: str) -> float:
    value = _field(body, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContextRecordError(ContextRejectReason.WRONG_SHAPE, f"{name} must be a number")
    return float(value)
