"""Bearer-token auth against the simulator (which answers 401 without the right token), and
the token never showing up in logs, errors or reprs."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    NotFoundError,
    PulsarAdminError,
    PulsarPeerGroup,
    RetryPolicy,
    ServerError,
    TokenSource,
    UnauthorizedError,
    UnavailableError,
)
from balancer.sim import RunningPeerGroup, start_peer_group

TOKEN = "eyJhbGciOiJIUzI1NiJ9.YmFsYW5jZXItdGVzdA.TOP-SECRET-signature-4242"
SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "three-cluster-peers.yaml"


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(SCENARIO, required_token=TOKEN) as running:
        yield running


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def _endpoints(sim: RunningPeerGroup, **overrides: TokenSource) -> list[ClusterEndpoint]:
    return [
        ClusterEndpoint(name, url, token=overrides.get(name))
        for name, url in sim.admin_urls.items()
    ]


def _split(client: PulsarPeerGroup, namespace: str) -> None:
    """A split: the route Pulsar redirects to the peer holding the namespace."""
    client.split_bundle(
        namespace,
        "0x00000000_0x40000000",
        algorithm="specified_positions_divide",
        boundaries=[0x20000000],
    )


def test_the_token_from_a_file_is_sent_on_every_hop(
    sim: RunningPeerGroup, token_file: Path
) -> None:
    with PulsarPeerGroup(
        _endpoints(sim), ClientSettings(token=TokenSource(file=token_file))
    ) as client:
        assert client.get_bundles("acme/east-ns").num_bundles == 4
        _split(client, "acme/west-ns")  # via a 307 to west
        assert client.owner_of("acme/west-ns") == "west"
        assert client.get_bundles("acme/west-ns").num_bundles == 5
    assert sim.unauthorized_requests == 0


def test_the_token_from_an_environment_variable_is_sent(sim: RunningPeerGroup) -> None:
    with PulsarPeerGroup(
        _endpoints(sim),
        ClientSettings(
            token=TokenSource(env_var="PULSAR_ADMIN_TOKEN"), environ={"PULSAR_ADMIN_TOKEN": TOKEN}
        ),
    ) as client:
        assert client.list_clusters() == ("east", "south", "west")
    assert sim.unauthorized_requests == 0


@pytest.mark.parametrize("token", [None, "not-the-token"], ids=["no-token", "wrong-token"])
def test_without_the_right_token_the_answer_is_401_and_not_retried(
    sim: RunningPeerGroup, token: str | None
) -> None:
    source = TokenSource(env_var="T") if token is not None else None
    with (
        PulsarPeerGroup(
            _endpoints(sim), ClientSettings(token=source, environ={"T": token} if token else {})
        ) as client,
        pytest.raises(UnauthorizedError) as info,
    ):
        client.get_bundles("acme/east-ns")
    assert info.value.status == 401 and info.value.reason == "Authentication required"
    assert client.request_count() == 1 and sim.unauthorized_requests == 1


def test_each_cluster_gets_its_own_token(sim: RunningPeerGroup, token_file: Path) -> None:
    # west has a (wrong) token of its own: the redirect to west must carry west's token,
    # not east's.
    endpoints = _endpoints(sim, west=TokenSource(env_var="WEST_TOKEN"))
    with PulsarPeerGroup(
        endpoints,
        ClientSettings(token=TokenSource(file=token_file), environ={"WEST_TOKEN": "west-only"}),
    ) as client:
        with pytest.raises(UnauthorizedError) as info:
            _split(client, "acme/west-ns")
        assert info.value.cluster == "west"
        assert client.get_bundles("acme/east-ns").num_bundles == 4
    assert sim.unauthorized_requests == 1


def test_the_token_never_appears_in_logs_errors_or_reprs(
    sim: RunningPeerGroup, token_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    errors: list[PulsarAdminError] = []
    client = PulsarPeerGroup(
        _endpoints(sim),
        ClientSettings(
            token=TokenSource(file=token_file),
            retry=RetryPolicy(max_attempts=2, base_delay_s=0.0),
            sleep=lambda _: None,
            rng=random.Random(0),
        ),
    )
    with client:
        _split(client, "acme/west-ns")  # a redirect
        client.split_bundle(
            "acme/east-ns",
            "0x00000000_0x40000000",
            algorithm="specified_positions_divide",
            boundaries=[0x20000000],
        )
        for call, cls in (
            (lambda: client.topic_stats("acme/east-ns/nope"), NotFoundError),
            (lambda: _split(client, "acme/south-ns"), PulsarAdminError),
        ):
            with pytest.raises(cls) as info:
                call()
            errors.append(info.value)
        sim.faults.configure(error_rate_500=1.0)
        with pytest.raises(ServerError) as server_error:
            client.list_tenants()
        errors.append(server_error.value)
        sim.faults.configure(error_rate_500=0.0, drop_connection_rate=1.0)
        with pytest.raises(UnavailableError) as unavailable:
            client.list_tenants()
        errors.append(unavailable.value)
        sim.faults.clear()
        texts = [repr(client), str(client.request_counts())]
    assert len(caplog.records) > 5  # the client and httpx did log
    logged = caplog.text + "".join(
        f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in caplog.records
    )
    assert TOKEN not in logged
    assert "TOP-SECRET" not in logged
    for err in errors:
        assert TOKEN not in str(err) and TOKEN not in repr(err) and TOKEN not in err.url
    assert all(TOKEN not in t for t in texts)
    assert sim.unauthorized_requests == 0


def test_a_token_rotated_on_both_sides_is_sent_again_after_the_401(
    sim: RunningPeerGroup,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The token file is rewritten keeping its mtime, on a file system whose stat shows no
    change (coarse timestamps), and the clock does not move: only the 401 makes the client
    read it again. Each cluster's client reads it on its own 401, and the split, a PUT, is
    applied once."""
    new_token = "eyJhbGciOiJIUzI1NiJ9.cm90YXRlZA.ROTATED-signature-5151"
    monkeypatch.setattr(
        "balancer.pulsar.auth._file_signature", lambda path: (1, 2, 3), raising=False
    )
    caplog.set_level(logging.DEBUG)
    with PulsarPeerGroup(
        _endpoints(sim),
        ClientSettings(token=TokenSource(file=token_file), monotonic=lambda: 0.0),
    ) as client:
        assert client.get_bundles("acme/east-ns").num_bundles == 4
        sim.rotate_token(new_token)
        stat = token_file.stat()
        token_file.write_text(new_token + "\n")
        os.utime(token_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        _split(client, "acme/west-ns")  # east: 401, again: 307; west: 401, again: 204
        assert client.request_count(method="PUT") == 2  # one attempt per hop
        assert client.token_problems() == {}
    assert sim.unauthorized_requests == 2
    assert len(sim.splits("acme/west-ns")) == 1
    assert TOKEN not in caplog.text and new_token not in caplog.text
