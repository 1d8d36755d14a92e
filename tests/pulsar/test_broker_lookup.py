"""Finding a broker's URL through an admin URL that fronts several brokers (issue 41,
point 2): an answer without a redirect came from the broker itself, which names no URL;
the look-up is asked again (a load balancer lands elsewhere, which redirects), and a broker
never redirected to is reported `behind_admin_url`, never guessed."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from balancer.pulsar.broker_addresses import BrokerUnreachableError, ReachedBy, Unreachable
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings

LB = "https://pulsar.example:8443"
OWNED = "/admin/v2/brokers/c/b1.example%3A8080/ownedNamespaces"


def client(handler: Callable[[httpx.Request], httpx.Response]) -> PulsarPeerGroup:
    settings = ClientSettings(
        retry=RetryPolicy(max_attempts=1, base_delay_s=0, max_delay_s=0),
        sleep=lambda s: None,
        http_transport=httpx.MockTransport(handler),
    )
    return PulsarPeerGroup([ClusterEndpoint("c", LB)], settings)


def load_balancer(
    direct_answers: int, brokers: list[str]
) -> Callable[[httpx.Request], httpx.Response]:
    """The first `direct_answers` look-ups land on b1 itself (200); later ones on b2, which
    redirects to b1's webServiceUrlTls."""
    left = [direct_answers]

    def handle(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        if url == f"{LB}/admin/v2/brokers/c":
            return httpx.Response(200, json=brokers)
        if url == f"{LB}{OWNED}":
            if left[0] > 0:
                left[0] -= 1
                return httpx.Response(200, json={})
            return httpx.Response(307, headers={"Location": f"https://b1.example:8443{OWNED}"})
        if url == f"https://b1.example:8443{OWNED}":
            return httpx.Response(200, json={})
        return httpx.Response(404, json={"reason": f"unexpected {url}"})

    return handle


def test_a_load_balancer_landing_on_the_broker_is_asked_again() -> None:
    with client(load_balancer(2, ["b1.example:8080", "b2.example:8080"])) as admin:
        found = admin.find_broker("c", "b1.example:8080")
    assert (found.url, found.reached_by) == ("https://b1.example:8443", ReachedBy.REGISTERED)


def test_a_broker_never_redirected_to_is_reported_not_guessed() -> None:
    with client(load_balancer(99, ["b1.example:8080", "b2.example:8080"])) as admin:
        with pytest.raises(BrokerUnreachableError) as caught:
            admin.broker_url("c", "b1.example:8080")
        assert caught.value.why is Unreachable.BEHIND_ADMIN_URL
        assert admin.broker_addresses.get("c", "b1.example:8080") is None


def test_the_only_broker_behind_the_admin_url_is_reached_there() -> None:
    with client(load_balancer(99, ["b1.example:8080"])) as admin:
        found = admin.find_broker("c", "b1.example:8080")
    assert (found.url, found.reached_by) == (LB, ReachedBy.ADMIN_URL)


def test_a_redirect_from_https_to_http_is_refused_and_named() -> None:
    """A broker that publishes no webServiceUrlTls is redirected to over http: the token
    must not follow it."""

    def handle(request: httpx.Request) -> httpx.Response:
        if str(request.url) == f"{LB}{OWNED}":
            return httpx.Response(307, headers={"Location": f"http://b1.example:8080{OWNED}"})
        return httpx.Response(500, json={"reason": "not asked"})

    with client(handle) as admin, pytest.raises(BrokerUnreachableError) as caught:
        admin.broker_url("c", "b1.example:8080")
    assert caught.value.why is Unreachable.REFUSED
