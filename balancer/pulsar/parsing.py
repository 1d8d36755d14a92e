"""Reading Pulsar's JSON answers: typed field readers that raise `ResponseShapeError`.

Each reader names the field it reads (`what.key`) and, for a topic entry rejected alone,
what kind of fault it is (`ResponseShapeError.reason`, the stream's rejection vocabulary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from balancer.core.bundles import BundleRange, InvalidBundle
from balancer.core.events import RejectReason
from balancer.core.topics import InvalidTopicName, parse_topic


class ResponseShapeError(ValueError):
    """A response body that does not have the shape Pulsar gives it.

    `reason` says what kind of fault, in the stream's rejection vocabulary, for a topic entry
    rejected alone (`RejectedTopicEntry`).
    """

    def __init__(self, message: str, reason: RejectReason = RejectReason.WRONG_TYPE) -> None:
        super().__init__(message)
        self.reason = reason


# Jackson's spellings of a non-finite double (WRITE_NAN_AS_STRINGS, its default), as a
# topic's /stats may hold them. broker-stats/topics is not Jackson-written (PulsarStats'
# StatsOutputStream prints NaN as 0.0 and +Infinity with a 2^63 integer part, which the stream
# rejects as rate_too_high), but a proxy or another implementation re-encoding it may use
# them. A bare NaN/Infinity (Jackson with that feature off) decodes to a float: isfinite.
_NON_FINITE_SPELLINGS = frozenset({"NaN", "Infinity", "-Infinity"})


def json_object(
    value: Any, what: str, reason: RejectReason = RejectReason.NOT_AN_OBJECT
) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ResponseShapeError(
            f"{what} must be a JSON object, got {type(value).__name__}", reason
        )
    return value


def or_empty(value: Any) -> Any:
    """Pulsar leaves empty maps out or sends null; anything else is checked by the caller."""
    return {} if value is None else value


def number(body: Mapping[str, Any], key: str, what: str) -> float:
    value = body.get(key, 0)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ResponseShapeError(
            f"{what}.{key} must be a finite number, got {value!r}", _number_fault(value)
        )
    return float(value)


def _number_fault(value: Any) -> RejectReason:
    """NOT_FINITE for a NaN or infinity in either spelling, else WRONG_TYPE."""
    if isinstance(value, float) and not math.isfinite(value):
        return RejectReason.NOT_FINITE
    if isinstance(value, str) and value in _NON_FINITE_SPELLINGS:
        return RejectReason.NOT_FINITE
    return RejectReason.WRONG_TYPE


def integer(body: Mapping[str, Any], key: str, what: str, default: int = 0) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResponseShapeError(
            f"{what}.{key} must be an integer, got {value!r}", _number_fault(value)
        )
    return value


def string(body: Mapping[str, Any], key: str, what: str, default: str = "") -> str:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ResponseShapeError(f"{what}.{key} must be a string, got {value!r}")
    return value


def string_list(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ResponseShapeError(f"{what} must be a JSON array of strings")
    return tuple(value)


def bundle_range(text: Any, what: str) -> BundleRange:
    try:
        return BundleRange.parse(text)
    except InvalidBundle as exc:
        raise ResponseShapeError(f"{what}: {exc}") from None


def topic_name(text: Any, what: str) -> str:
    try:
        return parse_topic(text).full
    except InvalidTopicName as exc:
        raise ResponseShapeError(f"{what}: {exc}") from None


def parse_string_list(body: Any, what: str) -> tuple[str, ...]:
    """A JSON array of strings (tenants, namespaces, clusters, topics)."""
    return string_list(body, what)
