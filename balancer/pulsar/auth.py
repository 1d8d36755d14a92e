"""Credentials and TLS for the admin client.

The bearer token comes from a file or from an environment variable named in the config,
never from a literal in the config. It is held as a pydantic `SecretStr`, so it prints as
`**********` in reprs, logs and error messages; only `BearerTokenAuth` ever reveals it, to put
it in the `Authorization` header.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import SecretStr

log = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AuthConfigError(ValueError):
    """Token or TLS settings that cannot work; the message never contains the token."""


@dataclass(frozen=True, slots=True)
class TokenSource:
    """Where the bearer token lives: exactly one of a file path or an environment variable NAME.

    A file is read again when it changes (mounted secrets are rotated in place).
    """

    file: Path | None = None
    env_var: str | None = None

    def __post_init__(self) -> None:
        if (self.file is None) == (self.env_var is None):
            raise AuthConfigError("a token source needs exactly one of 'file' or 'env_var'")
        if self.env_var is not None and not _ENV_NAME.match(self.env_var):
            # Do not echo the value: someone may have pasted the token itself here.
            raise AuthConfigError(
                "token env_var must be the NAME of an environment variable "
                "(letters, digits, underscore), not the token itself"
            )

    def describe(self) -> str:
        """Where the token comes from, safe to log."""
        return f"file {self.file}" if self.file is not None else f"env var {self.env_var}"

    def load(self, environ: Mapping[str, str] | None = None) -> SecretStr:
        """Read the token now; raise AuthConfigError when it is missing or empty."""
        if self.file is not None:
            try:
                text = self.file.read_text(encoding="utf-8")
            except OSError as exc:
                raise AuthConfigError(
                    f"cannot read token file {self.file}: {exc.strerror}"
                ) from None
        else:
            env = os.environ if environ is None else environ
            assert self.env_var is not None  # checked in __post_init__
            if self.env_var not in env:
                raise AuthConfigError(f"token environment variable {self.env_var} is not set")
            text = env[self.env_var]
        token = text.strip()
        if not token:
            raise AuthConfigError(f"token from {self.describe()} is empty")
        if any(c.isspace() for c in token):
            raise AuthConfigError(f"token from {self.describe()} contains whitespace")
        return SecretStr(token)


class BearerTokenAuth(httpx.Auth):
    """httpx auth that sends `Authorization: Bearer <token>` on every request.

    The token is read once at construction (so a bad source fails at start-up) and, for a
    file, read again when the file's modification time changes.
    """

    def __init__(self, source: TokenSource, *, environ: Mapping[str, str] | None = None) -> None:
        self._source = source
        self._token = source.load(environ)
        self._mtime_ns = self._file_mtime_ns()

    def __repr__(self) -> str:
        return f"BearerTokenAuth(source={self._source.describe()!r}, token=**********)"

    @property
    def token(self) -> SecretStr:
        return self._token

    def _file_mtime_ns(self) -> int | None:
        if self._source.file is None:
            return None
        try:
            return self._source.file.stat().st_mtime_ns
        except OSError:
            return None

    def _refresh(self) -> None:
        mtime_ns = self._file_mtime_ns()
        if mtime_ns is None or mtime_ns == self._mtime_ns:
            return
        try:
            self._token = self._source.load()
        except AuthConfigError as exc:
            log.warning("keeping the previous token: %s", exc)
            return
        self._mtime_ns = mtime_ns
        log.info("reloaded the admin token from %s", self._source.describe())

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self._refresh()
        request.headers["Authorization"] = f"Bearer {self._token.get_secret_value()}"
        yield request


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """TLS towards the admin endpoints. Verification is on unless `verify=False` is explicit."""

    ca_bundle: Path | None = None
    verify: bool = True
    client_cert: Path | None = None
    client_key: Path | None = None

    def __post_init__(self) -> None:
        if self.client_key is not None and self.client_cert is None:
            raise AuthConfigError("tls client_key given without client_cert")

    def httpx_verify(self) -> ssl.SSLContext | bool:
        """What httpx takes as `verify=`: an SSL context, or False when verification is off."""
        if not self.verify:
            log.warning("TLS certificate verification is DISABLED for the Pulsar admin client")
            return False
        try:
            context = ssl.create_default_context(
                cafile=str(self.ca_bundle) if self.ca_bundle is not None else None
            )
            if self.client_cert is not None:
                context.load_cert_chain(
                    str(self.client_cert),
                    str(self.client_key) if self.client_key is not None else None,
                )
        except (OSError, ssl.SSLError) as exc:
            raise AuthConfigError(f"cannot load TLS files: {exc}") from None
        return context
