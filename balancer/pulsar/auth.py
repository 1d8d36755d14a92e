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
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import SecretStr

log = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A token file's content is read again at least this often even when its stat shows no
# change: on a file system with coarse timestamps a rewrite of the same size within one tick
# keeps every field. One read of a small file a second costs nothing next to a request.
TOKEN_REREAD_INTERVAL_S = 1.0


class AuthConfigError(ValueError):
    """Token or TLS settings that cannot work; the message never contains the token."""


@dataclass(frozen=True, slots=True)
class TokenSource:
    """Where the bearer token lives: exactly one of a file path or an environment variable NAME.

    A file is read again when its content changes (mounted secrets are rotated in place):
    see `BearerTokenAuth`.
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


def _file_signature(path: Path) -> tuple[int, ...] | None:
    """What a stat shows of a file: a change in any field means new content may be there.

    ctime too: a rewrite that restores the old mtime (`cp -p`, `touch -r`) still moves it.
    """
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class BearerTokenAuth(httpx.Auth):
    """httpx auth that sends `Authorization: Bearer <token>` on every request.

    The token is read once at construction (so a bad source fails at start-up). A file is
    read again when its stat changes (checked on every request), at least every
    `reread_interval_s` whatever its stat, and on a 401: if that gives a new token, the
    request is sent once more with it; otherwise the 401 is the answer. A file that becomes
    unusable (deleted, unreadable, empty) is logged once as a WARNING and shown by
    `token_problem`, and the last good token is sent meanwhile.
    """

    def __init__(
        self,
        source: TokenSource,
        *,
        environ: Mapping[str, str] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        reread_interval_s: float = TOKEN_REREAD_INTERVAL_S,
    ) -> None:
        self._source = source
        self._monotonic = monotonic
        self._reread_interval_s = reread_interval_s
        self._lock = threading.Lock()  # one auth serves every thread using its client
        file = source.file
        self._signature = _file_signature(file) if file is not None else None
        self._token = source.load(environ)
        self._previous: SecretStr | None = None
        self._read_at_s = monotonic()
        self._problem: str | None = None

    def __repr__(self) -> str:
        return f"BearerTokenAuth(source={self._source.describe()!r}, token=**********)"

    @property
    def token(self) -> SecretStr:
        return self._token

    @property
    def token_problem(self) -> str | None:
        """Why the token file cannot be used now (gone, unreadable, empty, holding
        whitespace), a sentence without the token; None when it is fine or the token comes
        from an environment variable. Meanwhile the last good token is sent."""
        with self._lock:
            return self._problem

    def secrets(self) -> tuple[SecretStr, ...]:
        """The token sent now and the one it replaced, to redact both from error texts."""
        with self._lock:
            return (self._token,) if self._previous is None else (self._token, self._previous)

    def _current(self, *, force: bool = False) -> SecretStr:
        """The token to send, the file read again first if it is due (or `force`d)."""
        file = self._source.file
        if file is None:
            return self._token
        with self._lock:
            now_s = self._monotonic()
            signature = _file_signature(file)
            due = signature != self._signature or now_s - self._read_at_s >= self._reread_interval_s
            if not (force or due):
                return self._token
            # Taken before the read: a change between the two is seen on the next request.
            self._signature = signature
            self._read_at_s = now_s
            try:
                token = self._source.load()
            except AuthConfigError as exc:
                self._note_problem(str(exc))
                return self._token
            self._note_problem(None)
            if token.get_secret_value() != self._token.get_secret_value():
                self._previous, self._token = self._token, token
                log.info("reloaded the admin token from %s", self._source.describe())
            return self._token

    def _note_problem(self, problem: str | None) -> None:
        """Log a problem once (a different one again), and its end; the lock is held."""
        if problem == self._problem:
            return
        if problem is not None:
            log.warning("%s; sending the last good token until it is fixed", problem)
        else:
            log.info("the token from %s is usable again", self._source.describe())
        self._problem = problem

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        sent = self._current()
        request.headers["Authorization"] = f"Bearer {sent.get_secret_value()}"
        response = yield request
        if response.status_code != 401 or self._source.file is None:
            return
        fresh = self._current(force=True)
        if fresh.get_secret_value() == sent.get_secret_value():
            return
        # A 401 comes from Pulsar's authentication filter, before any handler ran: sending
        # the request again cannot apply anything twice (a split included).
        log.info("HTTP 401 with the previous admin token: sending the request once more")
        request.headers["Authorization"] = f"Bearer {fresh.get_secret_value()}"
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
