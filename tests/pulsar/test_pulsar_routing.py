"""Peer-group routing: endpoints, redirect resolution, loop and hop limits, owner cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.pulsar.errors import RedirectLoopError, TooManyRedirectsError
from balancer.pulsar.routing import (
    ClusterEndpoint,
    Hop,
    PeerRouter,
    RedirectChain,
    RoutingConfigError,
    routed_to,
    routing_hint,
    safe_url,
)

A = ClusterEndpoint("a", "http://127.0.0.1:8001")
B = ClusterEndpoint("b", "http://127.0.0.1:8002/")
C = ClusterEndpoint("c", "https://pulsar-c.example/prefix")


def _router() -> PeerRouter:
    return PeerRouter({"a": A, "b": B, "c": C})


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("a", "ftp://host"),
        ("a", "http://"),
        ("a", "http://user:secret@host:8080"),
        ("a", "http://host:8080/?x=1"),
        ("", "http://host"),
        ("a/b", "http://host"),
        (" a", "http://host"),
    ],
    ids=["scheme", "no-host", "credentials", "query", "empty-name", "slash-name", "space-name"],
)
def test_bad_endpoints_are_rejected(name: str, url: str) -> None:
    with pytest.raises(RoutingConfigError) as info:
        ClusterEndpoint(name, url)
    assert "secret" not in str(info.value)


def test_endpoint_drops_the_trailing_slash_and_builds_urls() -> None:
    assert B.admin_url == "http://127.0.0.1:8002"
    assert B.url("/admin/v2/clusters") == "http://127.0.0.1:8002/admin/v2/clusters"
    assert C.url("/admin/v2/x") == "https://pulsar-c.example/prefix/admin/v2/x"


@pytest.mark.parametrize(
    ("location", "cluster", "listed"),
    [
        ("http://127.0.0.1:8002/admin/v2/namespaces/t/ns/bundles", "b", True),
        ("https://pulsar-c.example/prefix/admin/v2/namespaces/t/ns/bundles", "c", True),
        ("https://pulsar-c.example:443/prefix/admin/v2/x", "c", True),
        ("https://pulsar-c.example/other/admin/v2/x", "a", False),
        ("http://10.0.0.9:8080/admin/v2/namespaces/t/ns/bundles", "a", False),
        ("/admin/v2/namespaces/t/ns/bundles", "a", True),
    ],
    ids=[
        "peer-b",
        "peer-c-prefix",
        "explicit-default-port",
        "other-prefix",
        "unlisted-broker",
        "relative",
    ],
)
def test_redirect_targets_are_attributed_to_clusters(
    location: str, cluster: str, listed: bool
) -> None:
    current = Hop("a", "http://127.0.0.1:8001/admin/v2/namespaces/t/ns/bundles")
    target = _router().resolve_redirect(current, location)
    assert (target.cluster, target.listed) == (cluster, listed)


def test_redirect_chain_follows_peers_and_detects_the_loop() -> None:
    chain = RedirectChain(first=Hop("a", A.url("/p")), max_hops=5, method="PUT")
    chain.follow(Hop("b", B.url("/p")))
    chain.follow(Hop("c", C.url("/p")))
    with pytest.raises(RedirectLoopError) as info:
        chain.follow(Hop("a", A.url("/p")))
    assert info.value.visited == ("a", "b", "c")
    assert info.value.status == 307 and info.value.method == "PUT"
    assert "a -> b -> c -> a" in str(info.value)


def test_redirect_chain_limits_the_hops() -> None:
    chain = RedirectChain(first=Hop("a", A.url("/p")), max_hops=1)
    chain.follow(Hop("b", B.url("/p")))
    with pytest.raises(TooManyRedirectsError) as info:
        chain.follow(Hop("c", C.url("/p")))
    assert info.value.visited == ("a", "b")


def test_zero_hops_refuses_any_redirect() -> None:
    chain = RedirectChain(first=Hop("a", A.url("/p")), max_hops=0)
    with pytest.raises(TooManyRedirectsError):
        chain.follow(Hop("b", B.url("/p")))


def test_brokers_inside_one_cluster_are_distinct_visits() -> None:
    chain = RedirectChain(first=Hop("a", A.url("/p")), max_hops=3)
    chain.follow(Hop("a", "http://10.0.0.9:8080/p", listed=False))
    assert chain.path == ["a", "a@http://10.0.0.9:8080"]
    with pytest.raises(RedirectLoopError):
        chain.follow(Hop("a", "http://10.0.0.9:8080/p", listed=False))


def test_back_to_the_same_broker_with_another_query_is_not_a_loop() -> None:
    # PulsarWebResource.validateBundleOwnership: X -> leader (authoritative=false) -> X with
    # authoritative=true. Only the same URL with the same query again is a loop.
    chain = RedirectChain(first=Hop("a", A.url("/p?unload=false")), max_hops=5)
    chain.follow(Hop("a", "http://10.0.0.9:8080/p?unload=false&authoritative=false", listed=False))
    chain.follow(Hop("a", A.url("/p?unload=false&authoritative=true")))
    assert chain.path == ["a", "a@http://10.0.0.9:8080", "a"]
    with pytest.raises(RedirectLoopError) as info:  # the same query, in another order
        chain.follow(Hop("a", A.url("/p?authoritative=true&unload=false")))
    assert info.value.visited == ("a", "a@http://10.0.0.9:8080", "a")
    assert "authoritative=true" in str(info.value)


def test_distinct_queries_still_stop_at_the_hop_limit() -> None:
    chain = RedirectChain(first=Hop("a", A.url("/p")), max_hops=2)
    chain.follow(Hop("a", A.url("/p?n=1")))
    chain.follow(Hop("a", A.url("/p?n=2")))
    with pytest.raises(TooManyRedirectsError):
        chain.follow(Hop("a", A.url("/p?n=3")))


def test_a_cluster_redirecting_back_with_the_same_url_is_a_loop() -> None:
    chain = RedirectChain(first=Hop("a", A.url("/p?x=1")), max_hops=5)
    chain.follow(Hop("b", B.url("/p?x=1")))
    with pytest.raises(RedirectLoopError):
        chain.follow(Hop("a", "http://127.0.0.1:8001/p?x=1"))


def test_a_namespace_starts_at_its_owner_then_its_home_then_the_entry() -> None:
    router = _router()
    assert router.start_cluster("t/ns", home="b") == "b"
    router.remember_owner("t/ns", "c")  # learnt from a real redirect: it wins
    assert router.start_cluster("t/ns", home="b") == "c"
    assert router.start_cluster(None, home="b") == "b"
    with pytest.raises(RoutingConfigError, match="unknown cluster 'z'"):
        router.start_cluster("t/other", home="z")


def test_routed_to_sets_the_home_cluster_for_its_block_only() -> None:
    assert routing_hint() is None
    with routed_to("b"):
        assert routing_hint() == "b"
        with routed_to("c"):
            assert routing_hint() == "c"
        assert routing_hint() == "b"
    assert routing_hint() is None


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        (
            "http://lb-b.example:80/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=true",
            "http://127.0.0.1:8002/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=true",
        ),
        (
            "https://b-tls.example:8443/pulsar/admin/v2/clusters",
            "http://127.0.0.1:8002/admin/v2/clusters",
        ),
    ],
    ids=["service-url", "service-url-tls-with-prefix"],
)
def test_a_cluster_data_service_url_leads_to_that_cluster_s_admin_url(
    location: str, expected: str
) -> None:
    router = _router()
    current = Hop("a", "http://127.0.0.1:8001/admin/v2/namespaces/t/ns/0x0_0x1/split")
    assert router.resolve_redirect(current, location).listed is False
    assert router.add_aliases("b", ["http://lb-b.example", "https://b-tls.example:8443/pulsar/"])
    assert not router.add_aliases("b", ["http://lb-b.example/"])  # nothing new
    target = router.resolve_redirect(current, location)
    assert (target.cluster, target.url, target.listed) == ("b", expected, True)


def test_a_multi_host_service_url_makes_every_host_an_alias() -> None:
    # PulsarServiceNameResolver: `http://h1:8080,h2:8080` (httpx rejects it as one URL).
    router = _router()
    assert router.add_aliases(
        "b", ["http://b1.example:8080,b2.example:8080", "https://b1.example:8443,b2.example"]
    )
    assert set(router.aliases()) == {
        "http://b1.example:8080",
        "http://b2.example:8080",
        "https://b1.example:8443",
        "https://b2.example:443",
    }
    assert set(router.aliases().values()) == {"b"}


def test_a_307_keeping_the_request_scheme_reaches_the_cluster_of_that_host() -> None:
    # PulsarWebResource.getRedirectionUrl: the request's URI with the peer's host and port,
    # so an https request can come back as https://<a host of the http serviceUrl>.
    router = _router()
    router.add_aliases("b", ["http://b1.example:8080,b2.example:8080"])
    current = Hop("a", "https://a.example:8443/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=false")
    target = router.resolve_redirect(
        current, "https://b2.example:8080/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=false"
    )
    assert (target.cluster, target.listed, target.broker) == ("b", True, False)
    assert target.url == B.url("/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=false")


def test_a_redirect_to_a_host_of_the_same_cluster_is_followed_as_sent() -> None:
    # Inside cluster b, the owner lookup names one of b's brokers: rewriting it to b's admin
    # URL would send it back to the broker that just redirected.
    router = _router()
    router.add_aliases("b", ["http://b1.example:8080,b2.example:8080"])
    current = Hop("b", B.url("/admin/v2/x"))
    target = router.resolve_redirect(
        current, "http://b2.example:8080/admin/v2/x?authoritative=true"
    )
    assert (target.cluster, target.listed, target.broker) == ("b", True, True)
    assert target.url == "http://b2.example:8080/admin/v2/x?authoritative=true"
    assert target.label == "b@http://b2.example:8080"


@pytest.mark.parametrize(
    ("url", "aliases"),
    [
        ("http://h1:8080,,h2:8080/", {"http://h1:8080", "http://h2:8080"}),
        ("http://h1:bad,h2:8080", {"http://h2:8080"}),
        ("http://user:secret@h1:8080,h2:8080", {"http://h1:8080", "http://h2:8080"}),
        ("ftp://h1,h2", set()),
        ("http://,", set()),
        ("not a url", set()),
    ],
    ids=["empty-host", "bad-port", "credentials", "scheme", "no-hosts", "garbage"],
)
def test_bad_hosts_of_a_service_url_are_skipped(url: str, aliases: set[str]) -> None:
    router = _router()
    router.add_aliases("b", [url])
    assert set(router.aliases()) == aliases
    assert "secret" not in repr(router.aliases())


def test_owner_cache_starts_at_the_owner_then_forgets() -> None:
    router = _router()
    assert router.entry_cluster == "a"
    assert router.start_cluster("t/ns") == "a"
    router.remember_owner("t/ns", "c")
    assert router.owner_of("t/ns") == "c"
    assert router.start_cluster("t/ns") == "c"
    assert router.start_cluster("t/other") == "a"
    router.forget_owner("t/ns")
    assert router.owner_of("t/ns") is None


@pytest.mark.parametrize(
    ("clusters", "entry"),
    [({}, None), ({"x": A}, None), ({"a": A}, "zz")],
    ids=["empty", "key-mismatch", "unknown-entry"],
)
def test_bad_peer_groups_are_rejected(
    clusters: dict[str, ClusterEndpoint], entry: str | None
) -> None:
    with pytest.raises(RoutingConfigError):
        PeerRouter(clusters, entry_cluster=entry)


def test_unknown_cluster_names_the_group() -> None:
    with pytest.raises(RoutingConfigError, match="a, b, c"):
        _router().endpoint("zz")


def test_safe_url_removes_credentials() -> None:
    assert safe_url("http://u:pw@host:1/x?y=1#f") == "http://host:1/x?y=1"


@given(
    targets=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=8),
    max_hops=st.integers(min_value=0, max_value=6),
)
def test_a_chain_stops_at_the_first_repeat_or_past_the_hop_limit(
    targets: list[str], max_hops: int
) -> None:
    first, *rest = targets
    chain = RedirectChain(first=Hop(first, f"http://{first}/p"), max_hops=max_hops)
    visited = [first]
    for name in rest:
        if name in visited:
            with pytest.raises(RedirectLoopError):
                chain.follow(Hop(name, f"http://{name}/p"))
            return
        if len(visited) - 1 >= max_hops:
            with pytest.raises(TooManyRedirectsError):
                chain.follow(Hop(name, f"http://{name}/p"))
            return
        chain.follow(Hop(name, f"http://{name}/p"))
        visited.append(name)
    assert chain.path == visited and len(visited) - 1 <= max_hops
