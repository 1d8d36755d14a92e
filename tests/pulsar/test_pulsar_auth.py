"""Token sources and TLS settings: the token is read from a file or a named env var, and
never shows up in reprs or error messages."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import pytest

from balancer.pulsar.auth import AuthConfigError, BearerTokenAuth, TlsSettings, TokenSource

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXJvbGU.s3cr3t-signature"


def test_token_from_a_file_is_stripped(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert TokenSource(file=path).load().get_secret_value() == TOKEN


def test_token_from_a_named_environment_variable() -> None:
    source = TokenSource(env_var="PULSAR_TOKEN")
    assert source.load({"PULSAR_TOKEN": TOKEN}).get_secret_value() == TOKEN


def test_the_token_is_masked_in_reprs() -> None:
    auth = BearerTokenAuth(TokenSource(env_var="T"), environ={"T": TOKEN})
    assert (
        TOKEN not in repr(auth) and TOKEN not in str(auth.token) and TOKEN not in repr(auth.token)
    )
    assert "env var T" in repr(auth)


def test_the_header_carries_the_token() -> None:
    auth = BearerTokenAuth(TokenSource(env_var="T"), environ={"T": TOKEN})
    request = next(auth.auth_flow(httpx.Request("GET", "http://127.0.0.1/")))
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_rotated_token_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token")
    auth = BearerTokenAuth(TokenSource(file=path))
    path.write_text("second-token")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    request = next(auth.auth_flow(httpx.Request("GET", "http://127.0.0.1/")))
    assert request.headers["Authorization"] == "Bearer second-token"


def test_an_emptied_token_file_keeps_the_previous_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token")
    auth = BearerTokenAuth(TokenSource(file=path))
    path.write_text("")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    request = next(auth.auth_flow(httpx.Request("GET", "http://127.0.0.1/")))
    assert request.headers["Authorization"] == "Bearer first-token"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one"),
        ({"file": Path("/x"), "env_var": "T"}, "exactly one"),
        ({"env_var": TOKEN}, "NAME of an environment variable"),
    ],
    ids=["none", "both", "token-pasted-as-env-name"],
)
def test_bad_token_sources_fail_without_echoing_the_value(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(AuthConfigError, match=match) as info:
        TokenSource(**kwargs)  # type: ignore[arg-type]
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize(
    ("content", "match"),
    [("", "empty"), ("  \n", "empty"), ("two words", "whitespace")],
    ids=["empty", "blank", "inner-space"],
)
def test_unusable_token_files_fail_at_start(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(AuthConfigError, match=match) as info:
        TokenSource(file=path).load()
    assert "words" not in str(info.value)


def test_missing_sources_fail_at_start(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match="cannot read token file"):
        TokenSource(file=tmp_path / "absent").load()
    with pytest.raises(AuthConfigError, match="PULSAR_TOKEN is not set"):
        TokenSource(env_var="PULSAR_TOKEN").load({})


def test_tls_verification_is_on_by_default() -> None:
    verify = TlsSettings().httpx_verify()
    assert not isinstance(verify, bool)
    assert verify.check_hostname is True


def test_tls_verification_off_only_when_explicit() -> None:
    assert TlsSettings(verify=False).httpx_verify() is False


def test_a_missing_ca_bundle_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match="cannot load TLS files"):
        TlsSettings(ca_bundle=tmp_path / "absent.pem").httpx_verify()


def test_a_client_key_needs_a_certificate(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError):
        TlsSettings(client_key=tmp_path / "k.pem")


# --- token files re-read on a change of content (issue 32) --------------------------------

FIRST, SECOND = "token-AAAA-first", "token-BBBB-other"  # the same length: the size stays


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _header(auth: BearerTokenAuth) -> str:
    return next(auth.auth_flow(httpx.Request("GET", "http://127.0.0.1/"))).headers["Authorization"]


def _rewrite_keeping_mtime(path: Path, text: str) -> None:
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size


@pytest.fixture
def coarse_timestamps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system whose stat shows no change for a rewrite (timestamps of one-second or
    coarser granularity, written within the same tick, same size, same inode)."""
    monkeypatch.setattr(
        "balancer.pulsar.auth._file_signature", lambda path: (1, 2, 3), raising=False
    )


def test_a_token_rewritten_with_its_old_mtime_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    auth = BearerTokenAuth(TokenSource(file=path))
    _rewrite_keeping_mtime(path, SECOND)
    assert _header(auth) == f"Bearer {SECOND}"


@pytest.mark.usefixtures("coarse_timestamps")
def test_an_unchanged_stat_still_rereads_the_content_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    clock = FakeClock()
    auth = BearerTokenAuth(TokenSource(file=path), monotonic=clock, reread_interval_s=1.0)
    path.write_text(SECOND)
    clock.now_s += 0.5
    assert _header(auth) == f"Bearer {FIRST}"  # not read on every request
    clock.now_s += 0.5
    assert _header(auth) == f"Bearer {SECOND}"


@pytest.mark.usefixtures("coarse_timestamps")
def test_a_401_rereads_the_file_and_retries_once_with_the_new_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    auth = BearerTokenAuth(TokenSource(file=path))
    _rewrite_keeping_mtime(path, SECOND)
    flow = auth.auth_flow(httpx.Request("PUT", "http://127.0.0.1/split"))
    first = next(flow)
    assert first.headers["Authorization"] == f"Bearer {FIRST}"
    retried = flow.send(httpx.Response(401, request=first))
    assert retried.headers["Authorization"] == f"Bearer {SECOND}"
    with pytest.raises(StopIteration):  # a second 401 is the answer: no loop
        flow.send(httpx.Response(401, request=retried))
    assert _header(auth) == f"Bearer {SECOND}"


@pytest.mark.parametrize("status", [401, 200, 403])
def test_without_a_new_token_the_answer_is_returned_as_is(tmp_path: Path, status: int) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    auth = BearerTokenAuth(TokenSource(file=path))
    flow = auth.auth_flow(httpx.Request("GET", "http://127.0.0.1/"))
    request = next(flow)
    if status != 401:
        path.write_text(SECOND)  # a token changed: still only a 401 re-sends
    with pytest.raises(StopIteration):
        flow.send(httpx.Response(status, request=request))


def test_a_token_from_an_environment_variable_is_not_retried() -> None:
    auth = BearerTokenAuth(TokenSource(env_var="T"), environ={"T": TOKEN})
    flow = auth.auth_flow(httpx.Request("GET", "http://127.0.0.1/"))
    request = next(flow)
    with pytest.raises(StopIteration):
        flow.send(httpx.Response(401, request=request))
    assert auth.token_problem is None


def test_a_deleted_token_file_is_reported_once_and_the_last_token_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    clock = FakeClock()
    auth = BearerTokenAuth(TokenSource(file=path), monotonic=clock)
    assert auth.token_problem is None
    caplog.set_level(logging.DEBUG)
    path.unlink()
    for _ in range(3):
        clock.now_s += 5.0
        assert _header(auth) == f"Bearer {TOKEN}"
    problem = auth.token_problem
    assert problem is not None and "cannot read token file" in problem and str(path) in problem
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()
    path.write_text(SECOND)
    assert _header(auth) == f"Bearer {SECOND}"
    assert auth.token_problem is None
    assert any("usable again" in r.getMessage() for r in caplog.records)
    logged = caplog.text + "".join(f"{r.args!r}" for r in caplog.records)
    assert TOKEN not in logged and SECOND not in logged
    assert TOKEN not in problem and TOKEN not in repr(auth) and SECOND not in repr(auth)


@pytest.mark.parametrize(
    ("content", "match"),
    [("", "empty"), ("two words", "whitespace")],
    ids=["emptied", "inner-space"],
)
def test_an_unusable_token_file_is_reported_and_the_last_token_kept(
    tmp_path: Path, content: str, match: str
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    auth = BearerTokenAuth(TokenSource(file=path))
    path.write_text(content)
    assert _header(auth) == f"Bearer {TOKEN}"
    assert auth.token_problem is not None and match in auth.token_problem
    assert "words" not in auth.token_problem


def test_the_tokens_sent_are_all_known_for_redaction(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    auth = BearerTokenAuth(TokenSource(file=path))
    path.write_text(SECOND)
    _header(auth)
    assert {s.get_secret_value() for s in auth.secrets()} == {FIRST, SECOND}
    assert FIRST not in repr(auth.secrets()) and SECOND not in repr(auth.secrets())
