"""Answers the simulator never gives (429 with Retry-After, malformed bodies, a 307 without a
Location, an error that echoes the token), from a scripted HTTP server on 127.0.0.1:0."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    InvalidResponseError,
    MessageId,
    PulsarPeerGroup,
    RetryPolicy,
    ServerError,
    TokenSource,
    TooManyRequestsError,
)

TOKEN = "scripted-secret-token-777"


@dataclass
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Scripted:
    """Answers requests in order from `script` (the last answer repeats)."""

    script: list[Answer] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                index = min(len(outer.paths), len(outer.script)) - 1
                answer = outer.script[index]
                self.send_response(answer.status)
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def do_PUT(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

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
def scripted() -> Iterator[Scripted]:
    server = Scripted()
    server.start()
    yield server
    server.stop()


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


LAYOUT = _json({"boundaries": ["0x00000000", "0x80000000", "0xffffffff"], "numBundles": 2})


def _client(scripted: Scripted, sleeps: list[float], attempts: int = 3) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint("s", scripted.url)],
        ClientSettings(
            token=TokenSource(env_var="TOK"),
            environ={"TOK": TOKEN},
            retry=RetryPolicy(max_attempts=attempts, base_delay_s=0.01, max_delay_s=5.0),
            sleep=sleeps.append,
            rng=random.Random(3),
        ),
    )


def test_429_is_retried_and_retry_after_is_honoured(scripted: Scripted) -> None:
    scripted.script = [
        Answer(429, _json({"reason": "Too many requests"}), {"Retry-After": "2"}),
        Answer(200, LAYOUT, {"Content-Type": "application/json"}),
    ]
    sleeps: list[float] = []
    with _client(scripted, sleeps) as client:
        assert client.get_bundles("t/ns").num_bundles == 2
        assert client.request_count() == 2
    assert sleeps == [2.0]  # the server's Retry-After beats the 10 ms jitter ceiling


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_split_answered_5xx_is_not_sent_again(scripted: Scripted, status: int) -> None:
    """A split is not idempotent: a 5xx may come after Pulsar applied it, and a second send
    would name a parent that no longer exists (412). The caller reads the layout back."""
    scripted.script = [Answer(status, _json({"reason": "boom"})), Answer(204)]
    sleeps: list[float] = []
    with _client(scripted, sleeps) as client, pytest.raises(ServerError) as info:
        client.split_bundle(
            "t/ns", "0x00000000_0x80000000",
            algorithm="specified_positions_divide", boundaries=[0x40000000],
        )  # fmt: skip
    assert info.value.status == status and info.value.attempts == 1
    assert len(scripted.paths) == 1 and sleeps == []


def test_an_offload_trigger_answered_5xx_is_not_sent_again(scripted: Scripted) -> None:
    scripted.script = [Answer(503, _json({"reason": "busy"})), Answer(204)]
    with _client(scripted, []) as client, pytest.raises(ServerError):
        client.trigger_offload("persistent://t/ns/x", MessageId(5, 0))
    assert len(scripted.paths) == 1


def test_a_split_answered_429_is_retried(scripted: Scripted) -> None:
    """429 is Pulsar refusing before acting: sending the split again is safe."""
    scripted.script = [Answer(429, _json({"reason": "Too many requests"})), Answer(204)]
    sleeps: list[float] = []
    with _client(scripted, sleeps) as client:
        client.split_bundle(
            "t/ns", "0x00000000_0x80000000",
            algorithm="specified_positions_divide", boundaries=[0x40000000],
        )  # fmt: skip
    assert len(scripted.paths) == 2 and len(sleeps) == 1


def test_429_after_every_retry_is_its_own_error(scripted: Scripted) -> None:
    scripted.script = [Answer(429, _json({"reason": "Too many requests"}))]
    sleeps: list[float] = []
    with _client(scripted, sleeps) as client, pytest.raises(TooManyRequestsError) as info:
        client.get_bundles("t/ns")
    assert info.value.status == 429 and info.value.attempts == 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (Answer(200, b"<html>proxy login</html>"), "not JSON|Expecting value"),
        (Answer(200, _json({"boundaries": ["0x00000000", "0x12"]})), "0xffffffff"),
        (Answer(200, _json({"numBundles": 4})), "KeyError"),
        (Answer(307), "307 without a Location"),
    ],
    ids=["html", "bad-layout", "missing-key", "redirect-without-location"],
)
def test_malformed_answers_are_invalid_response_errors(
    scripted: Scripted, answer: Answer, match: str
) -> None:
    scripted.script = [answer]
    with _client(scripted, []) as client, pytest.raises(InvalidResponseError, match=match):
        client.get_bundles("t/ns")


def test_lookup_reads_plain_text_and_rejects_garbage(scripted: Scripted) -> None:
    scripted.script = [
        Answer(200, b"0x40000000_0x80000000", {"Content-Type": "text/plain"}),
        Answer(200, b"somewhere"),
    ]
    with _client(scripted, []) as client:
        assert str(client.lookup_bundle("t/ns/x")) == "0x40000000_0x80000000"
        with pytest.raises(InvalidResponseError, match="somewhere"):
            client.lookup_bundle("t/ns/x")
    assert scripted.paths[0] == "/lookup/v2/topic/persistent/t/ns/x/bundle"


def test_an_error_echoing_the_token_is_redacted(scripted: Scripted) -> None:
    scripted.script = [Answer(500, _json({"reason": f"bad credentials Bearer {TOKEN}"}))]
    with _client(scripted, [], attempts=1) as client, pytest.raises(ServerError) as info:
        client.get_bundles("t/ns")
    assert TOKEN not in str(info.value) and TOKEN not in info.value.reason
    assert "Bearer **********" in info.value.reason


def test_a_plain_text_error_body_becomes_the_reason(scripted: Scripted) -> None:
    scripted.script = [Answer(502, b"Bad Gateway from the ingress\n")]
    with _client(scripted, [], attempts=1) as client, pytest.raises(ServerError) as info:
        client.get_bundles("t/ns")
    assert info.value.reason == "Bad Gateway from the ingress"


def test_path_parts_are_percent_encoded(scripted: Scripted) -> None:
    positions = {"namespace": "t/ns", "bundle": "0x00000000_0x40000000", "topicHashPositions": {}}
    scripted.script = [Answer(200, _json({})), Answer(200, _json(positions))]
    with _client(scripted, []) as client:
        client.topic_stats("persistent://t/ns/odd name?x=1#y")
        client.topic_hash_positions("t/ns", "0x00000000_0x40000000", ["t/ns/a&b", "t/ns/c"])
    assert scripted.paths[0] == "/admin/v2/persistent/t/ns/odd%20name%3Fx%3D1%23y/stats"
    assert scripted.paths[1] == (
        "/admin/v2/namespaces/t/ns/0x00000000_0x40000000/topicHashPositions"
        "?topics=persistent%3A%2F%2Ft%2Fns%2Fa%26b&topics=persistent%3A%2F%2Ft%2Fns%2Fc"
    )


def test_broker_stats_empty_until_the_first_update_then_pulsars_answer(
    scripted: Scripted,
) -> None:
    """A broker answers an empty body until its first stats update; then a real answer, whose
    V1 heartbeat namespace does not fail the poll and whose producers come from
    producerCount (the publishers lists are hidden)."""
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "pulsar"
    body = (fixture / "broker-stats-topics.json").read_bytes()
    scripted.script = [
        Answer(200, b"", {"Content-Type": "application/json"}),
        Answer(200, body, {"Content-Type": "application/json"}),
    ]
    with _client(scripted, [], attempts=1) as client:
        first = client.broker_topic_stats("s")
        assert len(first) == 0 and first.no_data
        second = client.broker_topic_stats("s")
    assert not second.no_data and second.skipped_namespaces == ("pulsar/east/10.0.4.9:8080",)
    producers = {e.topic.rsplit("/", 1)[1]: e.stats.publisher_count for e in second}
    assert producers == {
        "orders-partition-0": 3,
        "orders-partition-4": 3,
        "orders-partition-3": 3,
        "ticks": 2,
        "ledger-archive": 1,
    }


def test_a_broker_stats_answer_with_nan_loses_only_that_topic(scripted: Scripted) -> None:
    """Both spellings of a NaN double reach the per-topic check: Jackson's quoted "NaN", and a
    bare NaN (Python's json, under httpx's response.json(), decodes it to float nan)."""
    good = '{"msgRateIn": 5.0, "storageSize": 10}'
    body = (
        '{"t/ns": {"0x00000000_0x80000000": {"persistent": {'
        f'"persistent://t/ns/a": {good}, '
        '"persistent://t/ns/quoted": {"msgRateIn": "NaN"}, '
        '"persistent://t/ns/bare": {"msgRateIn": NaN}}}, '
        f'"0x80000000_0xffffffff": {{"persistent": {{"persistent://t/ns/b": {good}}}}}}}}}'
    ).encode()
    scripted.script = [Answer(200, body, {"Content-Type": "application/json"})]
    with _client(scripted, [], attempts=1) as client:
        stats = client.broker_topic_stats("s")
    assert sorted(e.topic for e in stats) == ["persistent://t/ns/a", "persistent://t/ns/b"]
    assert {(r.topic, r.reason.value) for r in stats.rejected} == {
        ("persistent://t/ns/quoted", "not_finite"),
        ("persistent://t/ns/bare", "not_finite"),
    }
    assert all(r.cluster == "s" for r in stats.rejected)


def test_an_error_echoing_a_rotated_out_token_is_redacted(
    scripted: Scripted, tmp_path: Path
) -> None:
    old, new = "old-scripted-token-1234", "new-scripted-token-5678"
    path = tmp_path / "token"
    path.write_text(old)
    scripted.script = [
        Answer(200, LAYOUT, {"Content-Type": "application/json"}),
        Answer(500, _json({"reason": f"proxy saw Bearer {old} then Bearer {new}"})),
    ]
    settings = ClientSettings(token=TokenSource(file=path), retry=RetryPolicy(max_attempts=1))
    with PulsarPeerGroup([ClusterEndpoint("s", scripted.url)], settings) as client:
        assert client.get_bundles("t/ns").num_bundles == 2
        path.write_text(new)
        with pytest.raises(ServerError) as info:
            client.get_bundles("t/ns")
    text = f"{info.value} {info.value!r} {info.value.reason}"
    assert old not in text and new not in text
    assert info.value.reason == "proxy saw Bearer ********** then Bearer **********"
