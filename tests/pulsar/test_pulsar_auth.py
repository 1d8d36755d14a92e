"""Token sources and TLS settings: the token is read from a file or a named env var, and
never shows up in reprs or error messages."""

from __future__ import annotations

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
