"""A peer whose ClusterData serviceUrl lists several hosts (`http://h1:8080,h2:8080`, read
by Pulsar's `PulsarServiceNameResolver`), against the simulator.

west has two brokers and advertises both; a 307 to west names one of them (the simulator
starts at the last, not the admin URL). The client must know that host as west's: west's
token goes there, never east's, and a failure there is west's, not east's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from balancer.core.bundles import BundleRange
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    PulsarPeerGroup,
    RequestRecord,
    RetryPolicy,
    ServerError,
    TokenSource,
)
from balancer.sim import PeerGroup, RunningPeerGroup, load_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "three-cluster-peers.yaml"
SPLIT = "/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split"
SPEC = "specified_positions_divide"
TOKENS = {
    "east": "east-token-0123456789abcdef",
    "west": "west-token-0123456789abcdef",
    "south": "south-token-0123456789abcdef",
}


def _start(*, redirect_to_owner: bool = False) -> RunningPeerGroup:
    scenario = load_scenario(SCENARIO)
    clusters = [
        c.model_copy(update={"brokers": 2, "multi_host_service_url": True})
        if c.name == "west"
        else c
        for c in scenario.clusters
    ]
    broker = scenario.broker.model_copy(update={"redirect_to_owner": redirect_to_owner})
    return PeerGroup(scenario.model_copy(update={"clusters": clusters, "broker": broker})).start(
        required_token="not-used-after-rotation"
    )


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    running = _start()
    try:
        for cluster, token in TOKENS.items():
            running.rotate_token(token, cluster=cluster)
        yield running
    finally:
        running.stop()


def _client(sim: RunningPeerGroup, records: list[RequestRecord]) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [
            ClusterEndpoint(name, url, token=TokenSource(env_var=f"TOKEN_{name.upper()}"))
            for name, url in sim.admin_urls.items()
        ],
        ClientSettings(
            entry_cluster="east",
            environ={f"TOKEN_{name.upper()}": token for name, token in TOKENS.items()},
            retry=RetryPolicy(max_attempts=1),
            on_request=records.append,
        ),
    )


def test_the_sim_advertises_every_broker_and_redirects_to_one_of_them(
    sim: RunningPeerGroup,
) -> None:
    west = sim.model.clusters["west"]
    hosts = [url.removeprefix("http://") for url in sim.broker_urls["west"]]
    assert west.advertised_url == f"http://{hosts[0]},{hosts[1]}"


def test_a_peer_redirect_to_any_host_of_the_list_carries_that_peer_s_token(
    sim: RunningPeerGroup,
) -> None:
    records: list[RequestRecord] = []
    with _client(sim, records) as client:
        client.split_bundle(
            "acme/west-ns", BundleRange(0, 0x40000000), algorithm=SPEC, boundaries=[1 << 28]
        )
        assert client.owner_of("acme/west-ns") == "west"
        assert "west" in set(client._t.router.aliases().values())
    assert sim.unauthorized_requests == 0  # no cluster ever saw another cluster's token
    assert [(r.cluster, r.status) for r in records if r.path_template == SPLIT] == [
        ("east", 307),
        ("west", 204),
    ]
    assert [s.cluster for s in sim.model.splits] == ["west"]


def test_a_failure_behind_a_multi_host_redirect_is_the_peer_s(sim: RunningPeerGroup) -> None:
    # The controller's circuit breaker counts a failure against `error.cluster`.
    sim.faults.configure(error_rate_500=1.0, only_paths=("/split",), only_clusters=("west",))
    records: list[RequestRecord] = []
    with _client(sim, records) as client, pytest.raises(ServerError) as info:
        client.split_bundle(
            "acme/west-ns", BundleRange(0, 0x40000000), algorithm=SPEC, boundaries=[1 << 28]
        )
    assert info.value.cluster == "west"
    assert [(r.cluster, r.status) for r in records if r.path_template == SPLIT] == [
        ("east", 307),
        ("west", 500),
    ]
    assert sim.unauthorized_requests == 0


def test_an_owner_redirect_to_another_listed_host_of_the_same_cluster_is_followed() -> None:
    """east -> west (its admin URL, broker 0) -> the owner broker 1, a host of west's own
    serviceUrl: followed as sent, not rewritten back to broker 0."""
    running = _start(redirect_to_owner=True)
    try:
        ns = running.model.namespaces["acme/west-ns"]
        bundle = next(b for b, owner in ns.owners.items() if owner == 1)
        records: list[RequestRecord] = []
        for cluster, token in TOKENS.items():
            running.rotate_token(token, cluster=cluster)
        with _client(running, records) as client:
            client.split_bundle("acme/west-ns", bundle, algorithm="range_equally_divide")
        assert [(r.cluster, r.status) for r in records if r.path_template == SPLIT] == [
            ("east", 307),
            ("west", 307),
            ("west", 204),
        ]
        assert running.model.broker_requests("west", "split") == {0: 1, 1: 1}
    finally:
        running.stop()
