"""Each broker reached at its registered web service URL (issue 41, point 2).

A broker id is `advertisedAddress:webServicePort`; with an https admin URL and brokers that
keep their plain port open, `https://<id>` speaks TLS to the plain port. The client reaches
each broker where Pulsar sends it (`PulsarWebResource.maybeRedirectToBroker`: the
webServiceUrlTls for an https request), and names a broker it cannot reach.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from balancer.app.collector_wiring import check_configured_brokers, start_broker_url_report
from balancer.app.config import BalancerConfig, ConfigError
from balancer.pulsar.auth import TlsSettings
from balancer.pulsar.broker_addresses import BrokerUnreachableError, Unreachable
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.routing import ClusterEndpoint
from balancer.sim.group import RunningPeerGroup
from tests.sim.broker_group import NS, one_namespace, started


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("tls", seed=5, topics=12, tls_web_port=True)) as g:
        yield g


@pytest.fixture
def client(group: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    assert group.tls_ca_file is not None
    tls = TlsSettings(ca_bundle=group.tls_ca_file)
    with PulsarPeerGroup([ClusterEndpoint("a", group.tls_admin_urls["a"], tls=tls)]) as admin:
        yield admin


def test_https_admin_url_reaches_brokers_that_keep_their_plain_port(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    brokers = client.list_brokers("a")
    assert sorted(brokers) == sorted(u.removeprefix("http://") for u in group.broker_urls["a"])
    owned: list[str] = []
    for plain, tls_url in zip(group.broker_urls["a"], group.broker_tls_urls["a"], strict=True):
        broker = plain.removeprefix("http://")
        owned += [b for b in client.owned_bundles("a", broker) if b.startswith(f"{NS}/")]
        report = client.load_report("a", broker)
        assert report.broker == broker
        assert client.broker_url("a", broker) == tls_url
    assert sorted(owned) == sorted(f"{NS}/{b}" for b in group.bundles(NS).bundles)


def test_a_broker_that_is_not_listed_is_named_never_guessed(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    with pytest.raises(BrokerUnreachableError) as caught:
        client.owned_bundles("a", "127.0.0.1:1")
    assert caught.value.broker == "127.0.0.1:1"
    assert caught.value.why is Unreachable.NOT_A_BROKER
    assert caught.value.status == 404
    assert client.broker_addresses.get("a", "127.0.0.1:1") is None


def test_a_configured_broker_url_is_used_as_given(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    plain = group.broker_urls["a"][2]
    broker = client.configure_broker_url("a", plain)
    assert broker == plain.removeprefix("http://")
    assert client.broker_url("a", broker) == plain
    before = client.request_count(
        path_template="/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces"
    )
    client.load_report("a", broker)
    after = client.request_count(
        path_template="/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces"
    )
    assert after == before  # no look-up


def test_a_configured_url_that_names_no_broker_refuses_the_start(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    """`https://host:<TLS port>` is where broker 1 answers, but not its id (the plain port):
    every unload naming that broker as destination would answer 409."""
    tls_url, plain = group.broker_tls_urls["a"][1], group.broker_urls["a"][1]
    config = _config(group, brokers=[tls_url])
    with pytest.raises(ConfigError) as caught:
        check_configured_brokers(config, client)
    assert tls_url in str(caught.value)
    assert f"its brokers: {', '.join(sorted(_ids(group)))}" in str(caught.value)
    check_configured_brokers(_config(group, brokers=[plain]), client)  # its id: fine
    assert client.broker_url("a", plain.removeprefix("http://")) == plain


def _ids(group: RunningPeerGroup) -> list[str]:
    return [u.removeprefix("http://") for u in group.broker_urls["a"]]


def _config(group: RunningPeerGroup, *, brokers: list[str]) -> BalancerConfig:
    cluster = {"name": "a", "admin_url": group.tls_admin_urls["a"], "brokers": brokers}
    return BalancerConfig.model_validate({"clusters": [cluster]})


def test_the_start_says_where_each_broker_answered(
    group: RunningPeerGroup, client: PulsarPeerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(group, brokers=[])
    with caplog.at_level(logging.INFO, logger="balancer.pulsar"):
        start_broker_url_report(config, client).join(timeout=60)
    said = sorted(
        r.getMessage().split(" (")[0] for r in caplog.records if "is reached at" in r.getMessage()
    )
    expected = sorted(
        f"broker {plain.removeprefix('http://')} of a is reached at {tls_url}"
        for plain, tls_url in zip(group.broker_urls["a"], group.broker_tls_urls["a"], strict=True)
    )
    assert said == expected


LEGACY = one_namespace("legacy", seed=5, topics=12, tls_web_port=True, legacy_broker_redirect=True)


@pytest.mark.parametrize("group", [LEGACY], indirect=True)
def test_an_older_pulsar_redirecting_to_the_id_is_named_and_its_plain_url_can_be_configured(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    """Before PR #21894 Pulsar redirects to `<request scheme>://<id>`: TLS to the plain port.
    The broker is named with the URL tried (no other URL guessed); its plain URL, whose
    host:port is its id, can be configured instead."""
    other = group.broker_urls["a"][1]
    broker = other.removeprefix("http://")
    with pytest.raises(BrokerUnreachableError) as caught:
        client.load_report("a", broker)
    assert caught.value.why is Unreachable.NO_ANSWER
    assert f"https://{broker}/" in str(caught.value)
    check_configured_brokers(_config(group, brokers=[other]), client)
    assert client.load_report("a", broker).broker == broker


def test_a_configured_url_without_a_port_names_no_broker(
    group: RunningPeerGroup, client: PulsarPeerGroup
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_configured_brokers(_config(group, brokers=["https://127.0.0.1"]), client)
    assert "https://127.0.0.1: broker id must be host:port" in str(caught.value)
