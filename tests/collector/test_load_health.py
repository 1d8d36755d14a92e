"""A broker whose load cannot be read is counted per broker and reason every round, and
logged once per change of state (issue 41 point 10)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from balancer.collector.admin import admin_fetch
from balancer.collector.load_health import LoadReportHealth
from balancer.collector.targets import Target
from balancer.pulsar.broker_admin import LoadReportUnavailableError
from balancer.pulsar.errors import UnauthorizedError
from balancer.pulsar.models import BrokerTopicStats


class Source:
    def __init__(self, answers: list[BaseException | None]) -> None:
        self.answers = answers

    def broker_topic_stats(self, cluster: str, broker_url: str | None = None) -> Any:
        return BrokerTopicStats(cluster=cluster, entries=())

    def load_report(self, cluster: str, broker: str) -> Any:
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer
        return None


def test_failures_are_counted_each_round_and_logged_on_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[tuple[str, str, str]] = []
    none = LoadReportUnavailableError("no report", status=404, cluster="c")
    refused = UnauthorizedError("refused", status=401, cluster="c")
    source = Source([none, none, none, refused, None, None])
    fetch = admin_fetch(
        source,
        load_reports=True,
        health=LoadReportHealth(lambda *labels: counted.append(labels)),
    )
    target = Target("c", "http://b:8080")
    with caplog.at_level(logging.INFO, logger="balancer.collector.load_health"):
        for _ in range(6):
            fetch(target)
    assert counted == [("c", "b:8080", "none")] * 3 + [("c", "b:8080", "unauthorized")]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines  # none, then unauthorized, then answering again
    assert "(none:" in lines[0] and "(unauthorized:" in lines[1] and "again" in lines[2]
