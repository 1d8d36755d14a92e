"""Fault injection for the simulated brokers: 5xx answers, slow answers, dropped connections,
307 loops (a redirect to the very URL asked), whole clusters down (every connection closed
unanswered) and malformed topic entries in broker-stats/topics.

Seeded and settable at runtime; every request asks `decide()` once, before it is routed.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any


class FaultKind(StrEnum):
    NONE = "none"
    ERROR_500 = "error_500"
    ERROR_503 = "error_503"
    DROP = "drop"
    REDIRECT_LOOP = "redirect_loop"  # 307 back to the same URL: a client must stop
    DOWN = "down"  # the cluster is down: the connection is closed unanswered


@dataclass(frozen=True)
class FaultDecision:
    kind: FaultKind
    latency_s: float


class FaultInjector:
    """Fractions of requests to fail; `only_paths` limits faults to paths containing any of
    the given substrings, `only_methods` to those HTTP methods (e.g. `PUT`: the offload trigger
    and not its status, which share a path), `only_clusters` to those clusters' brokers
    (empty = all). `down_clusters` answer nothing at all, whatever the paths.
    `malformed_topics` maps a topic's full name to fields written over its entry in
    broker-stats/topics, e.g. `{"msgRateIn": "NaN"}` (Jackson's spelling) or `float("nan")`
    (served as a bare `NaN`); the rest of the answer stays as it is. Counters in `injected` by
    kind (`malformed_topic_entry`: once per entry served)."""

    def __init__(self, *, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self.error_rate_500 = 0.0
        self.error_rate_503 = 0.0
        self.drop_connection_rate = 0.0
        self.redirect_loop_rate = 0.0
        self.latency_s = 0.0
        self.offload_failure_rate = 0.0  # share of offloads that end in ERROR
        self.only_paths: tuple[str, ...] = ()
        self.only_methods: tuple[str, ...] = ()
        self.only_clusters: tuple[str, ...] = ()
        self.down_clusters: tuple[str, ...] = ()
        self.malformed_topics: Mapping[str, Mapping[str, Any]] = MappingProxyType({})
        self.injected: Counter[str] = Counter()

    def configure(
        self,
        *,
        error_rate_500: float | None = None,
        error_rate_503: float | None = None,
        drop_connection_rate: float | None = None,
        redirect_loop_rate: float | None = None,
        latency_s: float | None = None,
        offload_failure_rate: float | None = None,
        only_paths: tuple[str, ...] | None = None,
        only_methods: tuple[str, ...] | None = None,
        only_clusters: tuple[str, ...] | None = None,
        down_clusters: tuple[str, ...] | None = None,
        malformed_topics: Mapping[str, Mapping[str, Any]] | None = None,
        seed: int | None = None,
    ) -> None:
        with self._lock:
            for name, value in (
                ("error_rate_500", error_rate_500),
                ("error_rate_503", error_rate_503),
                ("drop_connection_rate", drop_connection_rate),
                ("redirect_loop_rate", redirect_loop_rate),
                ("offload_failure_rate", offload_failure_rate),
            ):
                if value is not None:
                    if not 0.0 <= value <= 1.0:
                        raise ValueError(f"{name} must be in [0, 1], got {value}")
                    setattr(self, name, value)
            if latency_s is not None:
                if latency_s < 0:
                    raise ValueError(f"latency_s must be >= 0, got {latency_s}")
                self.latency_s = latency_s
            if only_paths is not None:
                self.only_paths = tuple(only_paths)
            if only_methods is not None:
                self.only_methods = tuple(m.upper() for m in only_methods)
            if only_clusters is not None:
                self.only_clusters = tuple(only_clusters)
            if down_clusters is not None:
                self.down_clusters = tuple(down_clusters)
            if malformed_topics is not None:
                self.malformed_topics = _malformed_topics(malformed_topics)
            if seed is not None:
                self._random = random.Random(seed)

    def clear(self) -> None:
        self.configure(
            error_rate_500=0.0,
            error_rate_503=0.0,
            drop_connection_rate=0.0,
            redirect_loop_rate=0.0,
            latency_s=0.0,
            offload_failure_rate=0.0,
            only_paths=(),
            only_methods=(),
            only_clusters=(),
            down_clusters=(),
            malformed_topics={},
        )

    def offload_fails(self) -> bool:
        """Decided when an offload starts: will it end in ERROR?"""
        with self._lock:
            if self.offload_failure_rate <= 0:
                return False
            fails = self._random.random() < self.offload_failure_rate
            if fails:
                self.injected["offload_failure"] += 1
            return fails

    def decide(self, path: str, cluster: str = "", method: str = "") -> FaultDecision:
        with self._lock:
            if cluster in self.down_clusters:
                self.injected[FaultKind.DOWN.value] += 1
                return FaultDecision(FaultKind.DOWN, 0.0)
            if self.only_paths and not any(p in path for p in self.only_paths):
                return FaultDecision(FaultKind.NONE, 0.0)
            if self.only_methods and method.upper() not in self.only_methods:
                return FaultDecision(FaultKind.NONE, 0.0)
            if self.only_clusters and cluster not in self.only_clusters:
                return FaultDecision(FaultKind.NONE, 0.0)
            # One draw per request splits [0, 1) into drop | 500 | 503 | 307 loop | none.
            draw = self._random.random()
            kind = FaultKind.NONE
            edge = self.drop_connection_rate
            if draw < edge:
                kind = FaultKind.DROP
            elif draw < (edge := edge + self.error_rate_500):
                kind = FaultKind.ERROR_500
            elif draw < (edge := edge + self.error_rate_503):
                kind = FaultKind.ERROR_503
            elif draw < edge + self.redirect_loop_rate:
                kind = FaultKind.REDIRECT_LOOP
            if kind is not FaultKind.NONE:
                self.injected[kind.value] += 1
            if self.latency_s > 0:
                self.injected["latency"] += 1
            return FaultDecision(kind, self.latency_s)

    def malform_broker_stats(self, document: Mapping[str, Any]) -> dict[str, Any] | None:
        """A broker-stats/topics document with the `malformed_topics` fields written over,
        or None when it holds none of them. `document` (cached by the model) is not changed:
        only the path down to each malformed entry is copied."""
        with self._lock:
            malformed = self.malformed_topics
        if not malformed:
            return None
        out: dict[str, Any] | None = None
        for namespace, bundles in document.items():
            for bundle, domains in bundles.items():
                for domain, topics in domains.items():
                    for topic in malformed.keys() & topics.keys():
                        if out is None:
                            out = dict(document)
                        ns_copy = out[namespace] = dict(out[namespace])
                        bundle_copy = ns_copy[bundle] = dict(ns_copy[bundle])
                        topics_copy = bundle_copy[domain] = dict(bundle_copy[domain])
                        topics_copy[topic] = {**topics[topic], **malformed[topic]}
                        with self._lock:
                            self.injected["malformed_topic_entry"] += 1
        return out


def _malformed_topics(value: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    if not isinstance(value, Mapping) or not all(
        isinstance(topic, str) and isinstance(fields, Mapping) for topic, fields in value.items()
    ):
        raise ValueError("malformed_topics maps a topic's full name to the fields to write over")
    return MappingProxyType({topic: dict(fields) for topic, fields in value.items()})
