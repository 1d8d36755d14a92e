"""Fault injection over real HTTP: a share of answers 500/503, slow answers, dropped
connections, 307 loops, a cluster down; seeded, so a run is repeatable."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.pulsar import ClusterEndpoint, PulsarPeerGroup, RedirectLoopError, RetryPolicy
from balancer.pulsar.settings import ClientSettings
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

SCENARIO: dict[str, Any] = {
    "name": "faults",
    "seed": 21,
    "clusters": [{"name": "c1"}, {"name": "c2"}],
    "namespaces": [{"name": "t/ns", "cluster": "c1", "topic_groups": [{"name": "x"}]}],
}
PATH = "/admin/v2/namespaces/t/ns/bundles"


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


def outcomes(group: RunningPeerGroup, n: int, path: str = PATH) -> Counter[str]:
    seen: Counter[str] = Counter()
    with httpx.Client(timeout=5.0) as http:
        for _ in range(n):
            try:
                seen[str(http.get(f"{group.admin_urls['c1']}{path}").status_code)] += 1
            except httpx.TransportError:
                seen["dropped"] += 1
    return seen


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"error_rate_500": 1.0}, "500"),
        ({"error_rate_503": 1.0}, "503"),
        ({"drop_connection_rate": 1.0}, "dropped"),
    ],
    ids=["all-500", "all-503", "all-dropped"],
)
def test_full_rate_faults(
    group: RunningPeerGroup, setting: dict[str, float], expected: str
) -> None:
    group.faults.configure(**setting)
    assert outcomes(group, 5) == {expected: 5}
    group.faults.clear()
    assert outcomes(group, 2) == {"200": 2}


def test_error_bodies_are_pulsar_reasons(group: RunningPeerGroup) -> None:
    group.faults.configure(error_rate_503=1.0)
    r = httpx.get(f"{group.admin_urls['c1']}{PATH}")
    assert r.status_code == 503 and "Injected" in r.json()["reason"]


def test_mixed_rates_give_roughly_those_shares(group: RunningPeerGroup) -> None:
    group.faults.configure(error_rate_500=0.2, error_rate_503=0.2, drop_connection_rate=0.1)
    seen = outcomes(group, 200)
    assert sum(seen.values()) == 200
    assert 20 <= seen["500"] <= 60 and 20 <= seen["503"] <= 60
    assert 5 <= seen["dropped"] <= 40 and seen["200"] >= 60
    assert group.faults.injected["error_500"] == seen["500"]


def test_faults_are_seeded(group: RunningPeerGroup) -> None:
    def run() -> list[str]:
        group.faults.configure(error_rate_500=0.5, seed=99)
        with httpx.Client(timeout=5.0) as http:
            return [str(http.get(f"{group.admin_urls['c1']}{PATH}").status_code) for _ in range(30)]

    first = run()
    assert set(first) == {"200", "500"}
    assert run() == first


def test_latency_slows_every_answer(group: RunningPeerGroup) -> None:
    group.faults.configure(latency_s=0.05)
    start = time.perf_counter()
    assert outcomes(group, 4) == {"200": 4}
    assert time.perf_counter() - start >= 0.2


def test_faults_can_be_limited_to_some_paths(group: RunningPeerGroup) -> None:
    group.faults.configure(error_rate_503=1.0, only_paths=("/broker-stats/",))
    assert outcomes(group, 3) == {"200": 3}
    assert outcomes(group, 3, "/admin/v2/broker-stats/topics") == {"503": 3}


def test_faults_can_be_limited_to_some_clusters(group: RunningPeerGroup) -> None:
    group.faults.configure(drop_connection_rate=1.0, only_clusters=("c2",))
    assert outcomes(group, 3) == {"200": 3}
    with httpx.Client(timeout=5.0) as http, pytest.raises(httpx.TransportError):
        http.get(f"{group.admin_urls['c2']}/admin/v2/clusters")


def test_bad_fault_settings_are_rejected(group: RunningPeerGroup) -> None:
    with pytest.raises(ValueError, match="error_rate_500"):
        group.faults.configure(error_rate_500=1.5)
    with pytest.raises(ValueError, match="latency_s"):
        group.faults.configure(latency_s=-1)


def test_a_redirect_loop_fault_is_caught_by_the_client(group: RunningPeerGroup) -> None:
    group.faults.configure(redirect_loop_rate=1.0, only_paths=("/bundles",))
    r = httpx.get(f"{group.admin_urls['c1']}{PATH}?x=1")
    assert r.status_code == 307 and r.headers["location"] == f"{group.admin_urls['c1']}{PATH}?x=1"
    endpoints = [ClusterEndpoint(name, url) for name, url in group.admin_urls.items()]
    with PulsarPeerGroup(endpoints, ClientSettings(retry=RetryPolicy(max_attempts=1))) as client:
        with pytest.raises(RedirectLoopError) as info:
            client.get_bundles("t/ns", cluster="c1")
        assert info.value.visited == ("c1",)
        assert client.list_clusters(via="c1") == ("c1", "c2")  # other paths unaffected
    assert group.faults.injected["redirect_loop"] == 2


def test_a_down_cluster_answers_nothing_on_any_path(group: RunningPeerGroup) -> None:
    group.faults.configure(down_clusters=("c1",), only_paths=("/broker-stats/",))
    assert outcomes(group, 2) == {"dropped": 2}  # down wins over the path filter
    with httpx.Client(timeout=5.0) as http:
        assert http.get(f"{group.admin_urls['c2']}/admin/v2/clusters").status_code == 200
    group.faults.clear()
    assert outcomes(group, 1) == {"200": 1}


def test_a_stopped_cluster_refuses_connections_until_restarted(group: RunningPeerGroup) -> None:
    url = group.admin_urls["c1"]
    group.stop_cluster("c1")
    with httpx.Client(timeout=5.0) as http:
        with pytest.raises(httpx.ConnectError):
            http.get(f"{url}{PATH}")
        assert http.get(f"{group.admin_urls['c2']}/admin/v2/clusters").status_code == 200
    group.start_cluster("c1")
    assert group.admin_urls["c1"] == url  # same port
    assert outcomes(group, 2) == {"200": 2}


def test_a_malformed_topic_entry_is_served_and_the_client_rejects_it_alone(
    group: RunningPeerGroup,
) -> None:
    topics = set(group.topics("t/ns"))
    bad = sorted(topics)[0]
    group.faults.configure(malformed_topics={bad: {"msgRateIn": "NaN", "msgRateOut": math.nan}})
    url = f"{group.admin_urls['c1']}/admin/v2/broker-stats/topics"
    raw = httpx.get(url).text
    assert '"msgRateIn":"NaN"' in raw and '"msgRateOut":NaN' in raw  # both of Jackson's forms
    endpoints = [ClusterEndpoint(name, u) for name, u in group.admin_urls.items()]
    with PulsarPeerGroup(endpoints, ClientSettings(retry=RetryPolicy(max_attempts=1))) as client:
        stats = client.broker_topic_stats("c1")
        assert {e.topic for e in stats} == topics - {bad}
        assert [(r.topic, r.reason.value) for r in stats.rejected] == [(bad, "not_finite")]
        group.faults.clear()
        healed = client.broker_topic_stats("c1")
    assert {e.topic for e in healed} == topics and healed.rejected == ()
    assert group.faults.injected["malformed_topic_entry"] == 2
    assert group.model.broker_stats.document("c1", 0) is not None  # the cached snapshot kept clean
    assert "NaN" not in json.dumps(group.model.broker_stats.document("c1", 0))


def test_malformed_topics_must_map_names_to_fields(group: RunningPeerGroup) -> None:
    with pytest.raises(ValueError, match="malformed_topics"):
        group.faults.configure(malformed_topics={"persistent://t/ns/x": "NaN"})  # type: ignore[dict-item]
