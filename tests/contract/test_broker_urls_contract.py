"""Each broker reached at its registered web service URL (issue 41, point 2), on the wire.

A broker id (`advertisedAddress:webServicePort`) is a name: the client finds the URL
Pulsar sends a request for that broker to (`PulsarWebResource.maybeRedirectToBroker`), and
ownedNamespaces and the load report are asked there. Checked on every target, and on a
simulated cluster whose brokers keep their plain port beside a TLS one, reached through an
https admin URL: the deployment where `https://<id>` answers nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from balancer.pulsar.auth import TlsSettings
from balancer.sim import parse_scenario, start_peer_group
from tests.contract.targets import ContractTarget

pytestmark = pytest.mark.pulsar_contract


@pytest.fixture(scope="module")
def tls_target() -> Iterator[ContractTarget]:
    """One simulated cluster of three brokers, each with a plain and a TLS web port."""
    doc = {
        "name": "contract-tls",
        "seed": 41,
        "clusters": [{"name": "east", "brokers": 3, "tls_web_port": True}],
        "namespaces": [
            {
                "name": "contract/tls",
                "cluster": "east",
                "bundles": 4,
                "topic_groups": [{"name": "t", "count": 12, "total_msg_rate_in": 120}],
            }
        ],
    }
    with start_peer_group(parse_scenario(doc)) as group:
        assert group.tls_ca_file is not None
        target = ContractTarget(
            kind="sim-tls",
            admin_url=group.tls_admin_urls["east"],
            cluster="east",
            token_file=None,
            broker_urls=group.broker_tls_urls["east"],
            tls=TlsSettings(ca_bundle=group.tls_ca_file),
            sim=group,
        )
        try:
            yield target
        finally:
            target.close()


def test_brokers_answer_at_their_registered_urls(target: ContractTarget) -> None:
    _answer_at_registered_urls(target)


def test_brokers_with_a_tls_port_answer_at_their_tls_urls(tls_target: ContractTarget) -> None:
    urls = _answer_at_registered_urls(tls_target)
    assert tls_target.sim is not None
    assert sorted(urls.values()) == sorted(tls_target.sim.broker_tls_urls["east"])
    for broker in urls:  # the id keeps the plain port, which speaks no TLS
        with pytest.raises(httpx.ConnectError):
            tls_target.http.get(f"https://{broker}/admin/v2/broker-stats/load-report")


def _answer_at_registered_urls(target: ContractTarget) -> dict[str, str]:
    """For each listed broker: the URL the client found answers ownedNamespaces for that
    broker itself (no redirect) and its load report, which publishes that URL as its
    webServiceUrl or webServiceUrlTls. Broker id -> URL."""
    found: dict[str, str] = {}
    with target.client() as client:
        for broker in client.list_brokers(target.cluster):
            url = client.broker_url(target.cluster, broker)
            assert url.startswith(httpx.URL(target.admin_url).scheme + "://")
            owned = target.http.get(
                f"{url}/admin/v2/brokers/{target.cluster}/{broker}/ownedNamespaces"
            )
            assert owned.status_code == 200, (broker, url, owned.status_code)
            assert isinstance(client.owned_bundles(target.cluster, broker), dict)
            report = target.http.get(f"{url}/admin/v2/broker-stats/load-report")
            if report.status_code == 500:  # the extensible load manager: no load report
                continue
            assert report.status_code == 200, report.text
            published = {report.json().get("webServiceUrl"), report.json().get("webServiceUrlTls")}
            assert url in {str(u).rstrip("/") for u in published if u}, (url, published)
            found[broker] = url
    return found
