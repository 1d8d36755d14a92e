"""The error tree and the retries, against the simulated peer group over real HTTP.

Faults are injected in the simulator; the client's sleep is a list that records the waits,
so no test waits on a real clock for a backoff.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from balancer.core.bundles import BundleRange
from balancer.pulsar import (
    ClientError,
    ClientSettings,
    ClusterEndpoint,
    NotFoundError,
    PreconditionFailedError,
    PulsarAdminError,
    PulsarPeerGroup,
    RequestRecord,
    RetryPolicy,
    ServerError,
    Timeouts,
    UnavailableError,
)
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

BUNDLES = "/admin/v2/namespaces/{tenant}/{namespace}/bundles"
SCENARIO: dict[str, Any] = {
    "name": "client-errors",
    "seed": 5,
    "clusters": [
        {"name": "a", "peers": ["b"]},
        {"name": "b"},
        {"name": "lonely"},  # not a peer of a: its namespaces are unreachable from a
    ],
    "namespaces": [
        {"name": "t/ns", "cluster": "a", "topic_groups": [{"name": "x", "count": 8}]},
        {"name": "t/far", "cluster": "lonely", "topic_groups": [{"name": "y", "count": 2}]},
    ],
}
POLICY = RetryPolicy(max_attempts=4, base_delay_s=0.5, max_delay_s=4.0)


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


class Recorder:
    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.records: list[RequestRecord] = []
        self.on_sleep: Callable[[], None] | None = None

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.on_sleep is not None:
            self.on_sleep()


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def _client(sim: RunningPeerGroup, rec: Recorder, **kwargs: Any) -> PulsarPeerGroup:
    options: dict[str, Any] = {
        "retry": POLICY,
        "sleep": rec.sleep,
        "rng": random.Random(1),
        "on_request": rec.records.append,
        "entry_cluster": "a",
    }
    options.update(kwargs)
    return PulsarPeerGroup(
        [ClusterEndpoint(name, url) for name, url in sim.admin_urls.items()],
        ClientSettings(**options),
    )


@pytest.mark.parametrize(
    ("call", "status", "cls", "reason"),
    [
        (
            lambda c: c.split_bundle(
                "t/ns", "0x00000000_0x20000000", algorithm="range_equally_divide"
            ),
            412,  # a bundle not in the layout (NamespaceBundles.validateBundle), never 404
            PreconditionFailedError,
            "Invalid upper boundary for bundle",
        ),
        (lambda c: c.topic_stats("t/ns/no-such-topic"), 404, NotFoundError, "not found"),
        (lambda c: c.get_bundles("t/missing"), 404, NotFoundError, "Namespace does not exist"),
        (
            lambda c: c.split_bundle("t/ns", "0x00000000_0x40000000", algorithm="zigzag"),
            412,
            PreconditionFailedError,
            "Unsupported namespace bundle split algorithm, supported algorithms are",
        ),
        (
            lambda c: c.split_bundle(
                "t/ns", "0x00000000_0x40000000", algorithm="specified_positions_divide"
            ),
            412,
            PreconditionFailedError,
            "splitBoundaries must not be empty",
        ),
        (
            # Split redirects to a peer holding the namespace; none does: 412.
            lambda c: c.split_bundle(
                "t/far", "0x00000000_0x40000000", algorithm="range_equally_divide"
            ),
            412,
            PreconditionFailedError,
            "Namespace missing local cluster name in clusters list",
        ),
    ],
    ids=[
        "unknown-bundle",
        "unknown-topic",
        "unknown-namespace",
        "unsupported-algorithm",
        "positions-without-boundaries",
        "namespace-on-no-peer",
    ],
)
def test_client_errors_are_typed_and_never_retried(
    sim: RunningPeerGroup,
    rec: Recorder,
    call: Callable[[PulsarPeerGroup], object],
    status: int,
    cls: type[ClientError],
    reason: str,
) -> None:
    with _client(sim, rec) as client, pytest.raises(cls) as info:
        call(client)
    err = info.value
    assert isinstance(err, ClientError) and type(err) is cls
    assert err.status == status and reason in err.reason and err.cluster == "a"
    assert err.url.startswith(sim.admin_urls["a"] + "/") and err.method in ("GET", "PUT")
    assert f"HTTP {status}" in str(err)
    assert client.request_count() == 1 and rec.sleeps == [] and err.attempts == 1


def test_5xx_is_retried_with_backoff_then_raised(sim: RunningPeerGroup, rec: Recorder) -> None:
    sim.faults.configure(error_rate_500=1.0)
    with _client(sim, rec) as client, pytest.raises(ServerError) as info:
        client.get_bundles("t/ns")
    assert info.value.status == 500 and info.value.reason.startswith("Injected fault")
    assert info.value.attempts == POLICY.max_attempts
    assert client.request_count(cluster="a", method="GET", path_template=BUNDLES) == 4
    assert sim.model.requests(route="bundles", cluster="a") == 4
    # Full jitter: each wait lies in [0, base * 2**(n-1)] (capped).
    assert len(rec.sleeps) == 3
    for n, slept in enumerate(rec.sleeps, start=1):
        assert 0 <= slept <= POLICY.ceiling_s(n)
    assert [r.status for r in rec.records] == [500] * 4
    assert [r.attempt for r in rec.records] == [1, 2, 3, 4]


@pytest.mark.parametrize("failures", [1, 2, 3], ids=["one", "two", "three"])
def test_a_fault_that_passes_costs_exactly_one_attempt_more_per_failure(
    sim: RunningPeerGroup, rec: Recorder, failures: int
) -> None:
    sim.faults.configure(error_rate_503=1.0)

    def heal() -> None:
        if len(rec.sleeps) == failures:
            sim.faults.clear()

    rec.on_sleep = heal
    with _client(sim, rec) as client:
        assert client.get_bundles("t/ns").num_bundles == 4
    assert client.request_count() == failures + 1
    assert [r.status for r in rec.records] == [503] * failures + [200]
    assert len(rec.sleeps) == failures


def test_a_dropped_connection_is_retried_then_unavailable(
    sim: RunningPeerGroup, rec: Recorder
) -> None:
    sim.faults.configure(drop_connection_rate=1.0)
    with _client(sim, rec) as client, pytest.raises(UnavailableError) as info:
        client.list_tenants(via="a")  # asked of "a" only: no fallback to another cluster
    err = info.value
    assert err.status is None and err.attempts == 4 and err.cluster == "a"
    assert "no answer after 4 attempt(s)" in str(err)
    assert client.request_count(cluster="a", path_template="/admin/v2/tenants") == 4
    assert [r.status for r in rec.records] == [None] * 4


def test_a_closed_port_is_unavailable(rec: Recorder) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is closed now: nothing listens there.
    with (
        PulsarPeerGroup(
            [ClusterEndpoint("gone", f"http://127.0.0.1:{port}")],
            ClientSettings(retry=RetryPolicy(max_attempts=3, base_delay_s=0.01), sleep=rec.sleep),
        ) as client,
        pytest.raises(UnavailableError) as info,
    ):
        client.get_bundles("t/ns")
    assert "ConnectError" in str(info.value) and info.value.attempts == 3
    assert client.request_count(cluster="gone") == 3 and len(rec.sleeps) == 2


def test_a_slow_answer_times_out_and_is_retried(sim: RunningPeerGroup, rec: Recorder) -> None:
    sim.faults.configure(latency_s=0.3, only_paths=("/bundles",))
    with (
        _client(
            sim,
            rec,
            retry=RetryPolicy(max_attempts=2, base_delay_s=0.0),
            timeouts=Timeouts(connect_s=1.0, read_s=0.05),
        ) as client,
        pytest.raises(UnavailableError, match="ReadTimeout"),
    ):
        client.get_bundles("t/ns")
    assert client.request_count(path_template=BUNDLES) == 2
    assert all(r.duration_s < 0.3 for r in rec.records)


def test_the_hook_sees_every_attempt_and_a_failing_hook_is_harmless(
    sim: RunningPeerGroup, rec: Recorder
) -> None:
    def broken(record: RequestRecord) -> None:
        rec.records.append(record)
        raise RuntimeError("metrics backend down")

    with _client(sim, rec, on_request=broken) as client:
        client.get_bundles("t/ns")
        client.list_clusters()
    assert [(r.cluster, r.method, r.path_template, r.status) for r in rec.records] == [
        ("a", "GET", BUNDLES, 200),
        ("a", "GET", "/admin/v2/clusters", 200),
    ]
    assert all(r.duration_s >= 0 for r in rec.records)


def test_bad_arguments_fail_before_any_request(sim: RunningPeerGroup, rec: Recorder) -> None:
    with _client(sim, rec) as client:
        for call in (
            lambda: client.get_bundles("no-slash"),
            lambda: client.split_bundle("t/ns", "whole", algorithm="range_equally_divide"),
            lambda: client.split_bundle(
                "t/ns", BundleRange(0, 0x40000000), algorithm="x", boundaries=[2**32]
            ),
            lambda: client.topic_stats("a/b/c/d"),
            lambda: client.topic_hash_positions("t/ns", BundleRange(0, 1), "t/ns/x"),
            lambda: client.get_peer_clusters("bad name"),
            lambda: client.list_tenants(via="not-in-group"),
        ):
            with pytest.raises(ValueError):
                call()
        assert client.request_count() == 0


def test_every_error_is_a_pulsar_admin_error(sim: RunningPeerGroup, rec: Recorder) -> None:
    sim.faults.configure(error_rate_503=1.0)
    with (
        _client(sim, rec, retry=RetryPolicy(max_attempts=1)) as client,
        pytest.raises(PulsarAdminError) as info,
    ):
        client.list_clusters()
    assert isinstance(info.value, ServerError) and info.value.status == 503
    assert "ServerError(status=503" in repr(info.value)
