"""Redirect safety checks of the transport, with httpx's in-process MockTransport (no network):
the token never follows a redirect from https down to plain http."""

from __future__ import annotations

import httpx
import pytest

from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    PulsarPeerGroup,
    RedirectRefusedError,
    RetryPolicy,
    TokenSource,
)

TOKEN = "transport-unit-token"
LAYOUT = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}


def _group(handler: httpx.MockTransport) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint("a", "https://a.example")],
        ClientSettings(
            token=TokenSource(env_var="T"),
            environ={"T": TOKEN},
            retry=RetryPolicy(max_attempts=1),
            http_transport=handler,
        ),
    )


def test_a_redirect_from_https_to_http_is_refused() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(307, headers={"Location": "http://broker-1.example:8080/x"})

    with (
        _group(httpx.MockTransport(answer)) as group,
        pytest.raises(RedirectRefusedError, match="from https to http") as info,
    ):
        group.get_bundles("t/ns")
    assert seen == ["https://a.example/admin/v2/namespaces/t/ns/bundles"]
    assert info.value.visited == ("a",)


def test_an_https_redirect_to_a_broker_of_the_cluster_is_followed_with_the_token() -> None:
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("Authorization")))
        if request.url.host == "a.example":
            return httpx.Response(
                307,
                headers={"Location": "https://broker-1.a.example/admin/v2/namespaces/t/ns/bundles"},
            )
        return httpx.Response(200, json=LAYOUT)

    with _group(httpx.MockTransport(answer)) as group:
        assert group.get_bundles("t/ns").num_bundles == 1
        assert group.owner_of("t/ns") is None  # a broker of the same cluster names no owner
        assert group.request_count(cluster="a") == 2
    assert seen == [("a.example", f"Bearer {TOKEN}"), ("broker-1.a.example", f"Bearer {TOKEN}")]


def test_a_redirect_down_to_http_on_a_host_of_the_cluster_s_own_service_url_is_refused() -> None:
    """A host of the cluster's ClusterData (a multi-host serviceUrl) is one of its brokers,
    followed as sent; the token still never goes from https down to plain http."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.path.startswith("/admin/v2/clusters/"):
            name = request.url.path.rsplit("/", 1)[1]
            return httpx.Response(200, json={"serviceUrl": f"http://{name}1:8080,{name}2:8080"})
        return httpx.Response(307, headers={"Location": "http://a2:8080/admin/v2/x"})

    with (
        PulsarPeerGroup(
            [ClusterEndpoint("a", "https://a.example"), ClusterEndpoint("b", "https://b.example")],
            ClientSettings(
                token=TokenSource(env_var="T"),
                environ={"T": TOKEN},
                retry=RetryPolicy(max_attempts=1),
                http_transport=httpx.MockTransport(answer),
            ),
        ) as group,
        pytest.raises(RedirectRefusedError, match="from https to http"),
    ):
        group.get_bundles("t/ns")
    assert not [url for url in seen if url.startswith("http://")]
