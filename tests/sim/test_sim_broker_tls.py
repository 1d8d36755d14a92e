"""Brokers with a plain and a TLS web port (issue 41, point 2): the id keeps the plain port,
the load report publishes both URLs, and ownedNamespaces asked over https of another broker
redirects to that broker's webServiceUrlTls (PulsarWebResource.maybeRedirectToBroker)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from balancer.sim.group import RunningPeerGroup
from tests.sim.broker_group import one_namespace, started


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("tls", seed=5, topics=12, tls_web_port=True)) as g:
        yield g


@pytest.fixture
def https(group: RunningPeerGroup) -> Iterator[httpx.Client]:
    assert group.tls_ca_file is not None
    with httpx.Client(
        verify=ssl.create_default_context(cafile=str(group.tls_ca_file)),
        follow_redirects=False,
        timeout=10,
    ) as c:
        yield c


def test_ids_keep_the_plain_port_and_reports_publish_both_urls(
    group: RunningPeerGroup, https: httpx.Client
) -> None:
    plain, secure = group.broker_urls["a"], group.broker_tls_urls["a"]
    assert all(u.startswith("https://") for u in secure) and len(secure) == 3
    listed = https.get(f"{secure[0]}/admin/v2/brokers/a").json()
    assert sorted(listed) == sorted(u.removeprefix("http://") for u in plain)
    for p_url, s_url in zip(plain, secure, strict=True):
        report = https.get(f"{s_url}/admin/v2/broker-stats/load-report").json()
        assert (report["webServiceUrl"], report["webServiceUrlTls"]) == (p_url, s_url)


def test_owned_namespaces_over_https_redirects_to_the_tls_url(
    group: RunningPeerGroup, https: httpx.Client
) -> None:
    plain, secure = group.broker_urls["a"], group.broker_tls_urls["a"]
    other = plain[1].removeprefix("http://")
    path = f"/admin/v2/brokers/a/{other}/ownedNamespaces"
    r = https.get(f"{secure[0]}{path}")
    assert r.status_code == 307
    assert r.headers["location"] == f"{secure[1]}{path}"
    # Asked over http, the same broker names its plain URL.
    r = https.get(f"{plain[0]}{path}")
    assert r.headers["location"] == f"{plain[1]}{path}"
    # `https://<id>` is the plain port spoken to in TLS: no answer.
    with pytest.raises(httpx.ConnectError):
        https.get(f"https://{other}{path}")


PEERS = {
    "name": "tls-peers",
    "seed": 6,
    "clusters": [
        {"name": "east", "peers": ["west"], "tls_web_port": True},
        {"name": "west", "peers": ["east"], "tls_web_port": True},
    ],
    "namespaces": [
        {
            "name": "t/w",
            "cluster": "west",
            "bundles": 4,
            "topic_groups": [{"name": "x", "count": 8, "total_msg_rate_in": 80}],
        }
    ],
}


@pytest.mark.parametrize("group", [PEERS], indirect=True)
def test_a_peer_redirect_over_https_goes_to_the_peers_tls_url(
    group: RunningPeerGroup, https: httpx.Client
) -> None:
    """PulsarWebResource.getRedirectionUrl: the peer's ClusterData serviceUrlTls for an
    https request, its serviceUrl for an http one."""
    east, west = group.broker_tls_urls["east"][0], group.broker_tls_urls["west"][0]
    assert https.get(f"{east}/admin/v2/clusters/west").json()["serviceUrlTls"] == west
    path = "/admin/v2/namespaces/t/w/0x00000000_0x40000000/unload"
    r = https.put(f"{east}{path}")
    assert (r.status_code, r.headers["location"]) == (307, f"{west}{path}")
    r = https.put(f"{group.admin_urls['east']}{path}")
    assert r.headers["location"] == f"{group.admin_urls['west']}{path}"
