"""The operations endpoint over real HTTP on 127.0.0.1, port 0."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from balancer.ops.exporter import BalancerMetrics
from balancer.ops.health import HealthServer, evaluate, standard_checks


class Flags:
    """Mutable readiness inputs the checks read."""

    def __init__(self) -> None:
        self.stream = True
        self.kafka = True
        self.clusters = [True, False]
        self.age_s: float | None = 5.0


@pytest.fixture
def flags() -> Flags:
    return Flags()


@pytest.fixture
def server(flags: Flags) -> Iterator[HealthServer]:
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, clock=lambda: 42.0)
    metrics.record_split("east", "applied", "topics", children=2)
    checks = standard_checks(
        stream_running=lambda: flags.stream,
        kafka_reachable=lambda: flags.kafka,
        clusters_reachable=lambda: flags.clusters,
        last_batch_age_s=lambda: flags.age_s,
        max_batch_age_s=120.0,
    )
    with HealthServer(registry=registry, checks=checks, host="127.0.0.1", port=0) as srv:
        yield srv


def test_metrics_endpoint_serves_the_explicit_registry(server: HealthServer) -> None:
    response = httpx.get(f"{server.url}/metrics", timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    splits = families["pulsar_balancer_splits"]
    assert [(s.labels, s.value) for s in splits.samples if s.name.endswith("_total")] == [
        ({"cluster": "east", "result": "applied", "reason": "topics"}, 1.0)
    ]
    assert families["pulsar_balancer_last_batch_timestamp_seconds"].samples[0].value == 42.0
    assert "process_cpu_seconds" in families or "python_info" in families


def test_metrics_endpoint_speaks_openmetrics_when_asked(server: HealthServer) -> None:
    response = httpx.get(
        f"{server.url}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        timeout=5,
    )
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.rstrip().endswith("# EOF")


def test_healthz_is_200_even_when_not_ready(server: HealthServer, flags: Flags) -> None:
    flags.stream = False
    response = httpx.get(f"{server.url}/healthz", timeout=5)
    assert response.status_code == 200
    assert response.json() == {"status": "alive"}


def test_readyz_200_when_all_checks_pass(server: HealthServer) -> None:
    response = httpx.get(f"{server.url}/readyz", timeout=5)
    assert response.status_code == 200
    assert response.json()["status"] == "ready"
    assert response.json()["failing"] == []


@pytest.mark.parametrize(
    ("break_it", "failing"),
    [
        (lambda f: setattr(f, "stream", False), ["stream_running"]),
        (lambda f: setattr(f, "kafka", False), ["kafka_reachable"]),
        (lambda f: setattr(f, "clusters", [False, False]), ["cluster_reachable"]),
        (lambda f: setattr(f, "clusters", []), ["cluster_reachable"]),
        (lambda f: setattr(f, "age_s", 121.0), ["last_batch_recent"]),
        (lambda f: setattr(f, "age_s", None), ["last_batch_recent"]),
        (
            lambda f: (setattr(f, "stream", False), setattr(f, "kafka", False)),
            ["kafka_reachable", "stream_running"],
        ),
    ],
    ids=["stream-down", "kafka-down", "no-cluster", "no-clusters-configured", "batch-too-old",
         "no-batch-yet", "two-failing"],
)  # fmt: skip
def test_readyz_503_names_the_failing_checks(
    server: HealthServer, flags: Flags, break_it: object, failing: list[str]
) -> None:
    break_it(flags)  # type: ignore[operator]
    response = httpx.get(f"{server.url}/readyz", timeout=5)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert sorted(body["failing"]) == failing


def test_unknown_path_is_404(server: HealthServer) -> None:
    assert httpx.get(f"{server.url}/nope", timeout=5).status_code == 404


def test_a_raising_check_is_failing_and_reports_only_its_class() -> None:
    def boom() -> bool:
        raise ConnectionError("http://admin:s3cret@host/ refused")

    readiness = evaluate({"ok": lambda: True, "kafka_reachable": boom})
    assert not readiness.ready
    assert readiness.failing == ["kafka_reachable"]
    assert readiness.errors == {"kafka_reachable": "ConnectionError"}
    assert b"s3cret" not in readiness.as_json()


def test_max_batch_age_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch_age_s"):
        standard_checks(
            stream_running=lambda: True,
            kafka_reachable=lambda: True,
            clusters_reachable=lambda: [True],
            last_batch_age_s=lambda: 0.0,
            max_batch_age_s=0,
        )


def test_stop_releases_the_port() -> None:
    srv = HealthServer(registry=CollectorRegistry(), checks={}).start()
    url = srv.url
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    srv.stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/healthz", timeout=2)


def test_readiness_follows_the_exporters_last_batch() -> None:
    """Wiring as in production: last_batch_age_s comes from BalancerMetrics and its clock."""
    now_s = [1_000.0]
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, clock=lambda: now_s[0])
    checks = standard_checks(
        stream_running=lambda: True,
        kafka_reachable=lambda: True,
        clusters_reachable=lambda: [True],
        last_batch_age_s=metrics.last_batch_age_s,
        max_batch_age_s=60.0,
    )
    report = SimpleNamespace(
        batch_id=1, window_end_ms=0, bundles=(), large_topics=(), events_consumed=0,
        events_rejected={}, events_late=0, kafka_lag={}, watermark_delay_s=0.0, duration_s=1.0,
        watermark_ms=0, newest_event_ms=0, offsets_skipped={},
    )  # fmt: skip
    with HealthServer(registry=registry, checks=checks) as srv:
        before = httpx.get(f"{srv.url}/readyz", timeout=5)
        metrics.observe_batch(report)
        now_s[0] += 30.0
        fresh = httpx.get(f"{srv.url}/readyz", timeout=5)
        now_s[0] += 31.0
        stale = httpx.get(f"{srv.url}/readyz", timeout=5)
    assert (before.status_code, before.json()["failing"]) == (503, ["last_batch_recent"])
    assert fresh.status_code == 200
    assert (stale.status_code, stale.json()["failing"]) == (503, ["last_batch_recent"])


def test_healthz_fails_while_a_liveness_check_fails_and_names_it() -> None:
    """Liveness checks: what only a restart cures (a stream that ended, a dead collector)."""
    state = {"stream": True}

    def collector_alive() -> bool:
        raise RuntimeError("secret://token@host")  # only the class may show

    checks = {"stream_alive": lambda: state["stream"], "collector_alive": lambda: True}
    with HealthServer(registry=CollectorRegistry(), checks={}, live_checks=checks) as srv:
        alive = httpx.get(f"{srv.url}/healthz", timeout=5)
        state["stream"] = False
        dead = httpx.get(f"{srv.url}/healthz", timeout=5)
    assert alive.status_code == 200
    assert alive.json() == {
        "status": "alive",
        "failing": [],
        "checks": {"stream_alive": True, "collector_alive": True},
    }
    assert dead.status_code == 503
    assert dead.json()["status"] == "not alive" and dead.json()["failing"] == ["stream_alive"]
    with HealthServer(
        registry=CollectorRegistry(), checks={}, live_checks={"collector_alive": collector_alive}
    ) as srv:
        raised = httpx.get(f"{srv.url}/healthz", timeout=5)
    assert raised.status_code == 503
    assert raised.json()["errors"] == {"collector_alive": "RuntimeError"}
    assert "secret" not in raised.text


def test_readiness_fails_while_most_events_are_late() -> None:
    """The exporter's late share over its span drives `events_on_time`."""
    now_s = [1_000.0]
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, clock=lambda: now_s[0])
    checks = standard_checks(
        stream_running=lambda: True,
        kafka_reachable=lambda: True,
        clusters_reachable=lambda: [True],
        last_batch_age_s=metrics.last_batch_age_s,
        max_batch_age_s=60.0,
        late_event_share=metrics.late_event_share,
    )

    def batch(batch_id: int, consumed: int, late: int) -> SimpleNamespace:
        return SimpleNamespace(
            batch_id=batch_id, window_end_ms=0, bundles=(), large_topics=(),
            events_consumed=consumed, events_rejected={}, events_late=late, kafka_lag={},
            watermark_delay_s=0.0, duration_s=1.0, watermark_ms=0, newest_event_ms=0,
            offsets_skipped={},
        )  # fmt: skip

    with HealthServer(registry=registry, checks=checks) as srv:
        metrics.observe_batch(batch(1, 100, 10))
        on_time = httpx.get(f"{srv.url}/readyz", timeout=5)
        now_s[0] += 30.0
        metrics.observe_batch(batch(2, 300, 300))
        late = httpx.get(f"{srv.url}/readyz", timeout=5)
    assert on_time.status_code == 200 and on_time.json()["checks"]["events_on_time"]
    assert (late.status_code, late.json()["failing"]) == (503, ["events_on_time"])
