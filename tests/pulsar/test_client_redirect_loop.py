"""Redirect loops and hop limits over real HTTP on loopback.

The simulated peer group never redirects back to a cluster already visited (it only sends a
request to the first peer holding the namespace), so the loop is produced by two tiny
servers that answer 307 to each other; each records what it received.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    PulsarPeerGroup,
    RedirectLoopError,
    RedirectRefusedError,
    RetryPolicy,
    TokenSource,
    TooManyRedirectsError,
)

TOKEN = "loop-test-token-0123456789"


@dataclass
class _Seen:
    method: str
    path: str
    body: bytes
    authorization: str | None


@dataclass
class _Redirector:
    """An HTTP server on 127.0.0.1:0 that answers every request with 307 to `target(path)`,
    or 204 when `target` gives None."""

    target: Callable[[str], str | None] = lambda path: path
    seen: list[_Seen] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append(
                    _Seen(self.command, self.path, body, self.headers.get("Authorization"))
                )
                location = outer.target(self.path)
                self.send_response(307 if location is not None else 204)
                if location is not None:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_PUT = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def servers() -> Iterator[list[_Redirector]]:
    started = [_Redirector() for _ in range(4)]
    for s in started:
        s.start()
    yield started
    for s in started:
        s.stop()


def _group(
    servers: list[_Redirector], *, max_redirect_hops: int = 3, clusters: int = 4
) -> PulsarPeerGroup:
    """Cluster a, b, ... on the first `clusters` servers; the others are unlisted hosts."""
    names = "abcd"
    return PulsarPeerGroup(
        [ClusterEndpoint(names[i], s.url) for i, s in enumerate(servers[:clusters])],
        ClientSettings(
            token=TokenSource(env_var="LOOP_TOKEN"),
            environ={"LOOP_TOKEN": TOKEN},
            retry=RetryPolicy(max_attempts=1),
            max_redirect_hops=max_redirect_hops,
        ),
    )


def test_a_redirect_back_to_a_visited_cluster_is_a_loop(servers: list[_Redirector]) -> None:
    a, b = servers[0], servers[1]
    a.target = lambda path: b.url + path
    b.target = lambda path: a.url + path
    with _group(servers) as group, pytest.raises(RedirectLoopError) as info:
        group.split_bundle(
            "t/ns",
            "0x00000000_0x40000000",
            algorithm="specified_positions_divide",
            boundaries=[0x10000000],
        )
    assert info.value.visited == ("a", "b")
    assert "a -> b -> a" in str(info.value)
    # Each cluster was asked exactly once, with the same method and body, and the token.
    assert [(s.method, s.body) for s in a.seen + b.seen] == [("PUT", b"[268435456]")] * 2
    assert a.seen[0].path == b.seen[0].path
    assert "splitAlgorithmName=specified_positions_divide" in b.seen[0].path
    assert {s.authorization for s in a.seen + b.seen} == {f"Bearer {TOKEN}"}
    assert TOKEN not in str(info.value) and TOKEN not in repr(info.value)
    assert group.owner_of("t/ns") is None


def test_a_redirect_to_itself_is_a_loop(servers: list[_Redirector]) -> None:
    with _group(servers) as group, pytest.raises(RedirectLoopError) as info:
        group.get_bundles("t/ns")  # `target` defaults to the same path on the same server
    assert info.value.visited == ("a",)
    assert len(servers[0].seen) == 1


def test_more_hops_than_allowed_stop(servers: list[_Redirector]) -> None:
    a, b, c, d = servers
    a.target = lambda path: b.url + path
    b.target = lambda path: c.url + path
    c.target = lambda path: d.url + path
    with (
        _group(servers, max_redirect_hops=2) as group,
        pytest.raises(TooManyRedirectsError) as info,
    ):
        group.get_bundles("t/ns")
    assert info.value.visited == ("a", "b", "c")
    assert (len(a.seen), len(b.seen), len(c.seen), len(d.seen)) == (1, 1, 1, 0)
    assert group.request_count() == 3


def test_unlisted_redirects_are_refused_when_configured(servers: list[_Redirector]) -> None:
    a, outsider = servers[0], servers[1]
    a.target = lambda path: outsider.url + path
    with (
        PulsarPeerGroup(
            [ClusterEndpoint("a", a.url)],
            ClientSettings(
                token=TokenSource(env_var="LOOP_TOKEN"),
                environ={"LOOP_TOKEN": TOKEN},
                follow_unlisted_redirects=False,
            ),
        ) as group,
        pytest.raises(RedirectRefusedError, match="outside the peer group"),
    ):
        group.get_bundles("t/ns")
    assert outsider.seen == []  # the token never went to the unlisted host


def test_unlisted_redirects_count_as_the_redirecting_cluster(
    servers: list[_Redirector],
) -> None:
    a, broker = servers[0], servers[1]
    a.target = lambda path: broker.url + path  # like Pulsar's redirect to the owner broker
    broker.target = lambda path: a.url + path
    with (
        PulsarPeerGroup([ClusterEndpoint("a", a.url)]) as group,
        pytest.raises(RedirectLoopError) as info,
    ):
        group.get_bundles("t/ns")
    assert info.value.visited == ("a", f"a@{broker.url}")
    assert group.request_count(cluster="a") == 2


def _with_authoritative(path: str, value: str) -> str:
    """Pulsar's `UriBuilder.replaceQueryParam("authoritative", value)`."""
    base, _, query = path.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith("authoritative=")]
    return f"{base}?{'&'.join([*kept, f'authoritative={value}'])}"


def test_broker_to_leader_and_back_with_authoritative_is_followed(
    servers: list[_Redirector],
) -> None:
    """PulsarWebResource.validateBundleOwnership on an unowned bundle: broker X (the admin
    URL) forwards to the leader with authoritative=false, the leader picks X and sends it
    back with authoritative=true, and X then owns the bundle and answers."""
    x, leader = servers[0], servers[1]
    x.target = lambda path: (
        None if "authoritative=true" in path else leader.url + _with_authoritative(path, "false")
    )
    leader.target = lambda path: x.url + _with_authoritative(path, "true")
    with _group(servers, clusters=1) as group:
        group.split_bundle(
            "t/ns",
            "0x00000000_0x40000000",
            algorithm="specified_positions_divide",
            boundaries=[0x10000000],
        )
        assert group.request_count(cluster="a") == 3
        assert group.owner_of("t/ns") is None  # no cluster was crossed
    assert [s.path.rpartition("&")[2] for s in x.seen] == [
        "splitAlgorithmName=specified_positions_divide",
        "authoritative=true",
    ]
    assert leader.seen[0].path.endswith("&authoritative=false")
    assert [s.body for s in x.seen + leader.seen] == [b"[268435456]"] * 3


def test_a_broker_that_redirects_back_with_the_same_query_is_a_loop(
    servers: list[_Redirector],
) -> None:
    x, leader = servers[0], servers[1]
    x.target = lambda path: leader.url + _with_authoritative(path, "false")
    leader.target = lambda path: x.url + _with_authoritative(path, "true")
    with (
        _group(servers, max_redirect_hops=10, clusters=1) as group,
        pytest.raises(RedirectLoopError),
    ):
        group.get_bundles("t/ns")
    # X, leader, X?authoritative=true, leader?authoritative=false again: that URL repeats.
    assert (len(x.seen), len(leader.seen)) == (2, 1)
