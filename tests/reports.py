"""Batch reports for tests: the stream's own `BatchReport`, with quiet defaults."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.report import BatchReport


def batch_report(
    batch_id: int = 1,
    window_end_ms: int = 60_000,
    bundles: Iterable[BundleLoad] = (),
    large_topics: Iterable[tuple[str, TopicLoad]] = (),
    **changes: Any,
) -> BatchReport:
    """A report of one batch: no events, no lag, 1 s long; `changes` set any other field."""
    report = BatchReport(
        batch_id=batch_id,
        window_end_ms=window_end_ms,
        bundles=tuple(bundles),
        large_topics=tuple(large_topics),
        events_consumed=0,
        events_rejected={},
        events_late=0,
        kafka_lag={},
        watermark_delay_s=0.0,
        duration_s=1.0,
    )
    return replace(report, **changes)
