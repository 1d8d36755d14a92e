"""The admin client's typed error tree.

Every error carries the HTTP status (None when no response arrived), Pulsar's own message
(`reason`, from its `{"reason": "..."}` JSON body), the method and the URL without
credentials, so a caller can record "already split" or "offload already running" as an
outcome instead of crashing. Messages never contain the bearer token.

    PulsarAdminError
    ├── ClientError (4xx)
    │   ├── BadRequestError (400)
    │   ├── UnauthorizedError (401)
    │   ├── ForbiddenError (403)
    │   ├── NotFoundError (404)
    │   ├── ConflictError (409)
    │   ├── PreconditionFailedError (412)
    │   └── TooManyRequestsError (429, after the retries ran out)
    ├── ServerError (5xx, after the retries ran out)
    ├── UnavailableError (no response: connection refused, timeouts, after the retries)
    │   └── OutcomeUnknownError (a split/offload sent, then a timeout or reset: may be applied)
    ├── RedirectLoopError (a 307 back to a URL already visited, with the same query)
    ├── TooManyRedirectsError (more 307 hops than allowed)
    ├── RedirectRefusedError (a 307 to a host the token must not go to)
    └── InvalidResponseError (a 2xx whose body is not what Pulsar sends)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class PulsarAdminError(Exception):
    """Base of every admin-client error."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        method: str = "",
        url: str = "",
        cluster: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.method = method
        self.url = url
        self.cluster = cluster
        self.attempts = attempts

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, reason={self.reason!r}, "
            f"method={self.method!r}, url={self.url!r}, cluster={self.cluster!r})"
        )


class ClientError(PulsarAdminError):
    """A 4xx answer: the request itself is wrong; retrying will not help (except 429)."""


class BadRequestError(ClientError):
    """400, e.g. an offload request without a message id."""


class UnauthorizedError(ClientError):
    """401: no token or a token the cluster does not accept."""


class ForbiddenError(ClientError):
    """403: the token's role may not do this."""


class NotFoundError(ClientError):
    """404: unknown namespace, bundle or topic."""


class ConflictError(ClientError):
    """409, e.g. "Offload already in progress"."""


class PreconditionFailedError(ClientError):
    """412, e.g. an unsupported split algorithm, or a namespace no peer cluster holds."""


class TooManyRequestsError(ClientError):
    """429 after every retry."""


class ServerError(PulsarAdminError):
    """A 5xx answer after every retry."""


class UnavailableError(PulsarAdminError):
    """No HTTP answer at all (connection refused or reset, timeout) after every retry.

    `timed_out`: the last attempt ran out of time (connect, read, write or pool timeout),
    rather than being refused or reset.
    """

    def __init__(self, message: str, *, timed_out: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.timed_out = timed_out


class OutcomeUnknownError(UnavailableError):
    """A call that changes Pulsar (split, trigger offload) was sent and no answer came back.

    A read timeout or a connection reset after the request left: Pulsar may have applied it,
    may still be applying it, or never got it. The transport does not re-send such a call
    (a second split would split the children); the caller reads Pulsar's state back instead.
    """


class _RedirectError(PulsarAdminError):
    """A redirect chain that had to stop; `visited` lists the hops in order: a cluster's
    name, or `cluster@scheme://host:port` for a broker that is not its admin URL."""

    def __init__(
        self,
        message: str,
        *,
        visited: Sequence[str],
        status: int | None = None,
        method: str = "",
        url: str = "",
        cluster: str | None = None,
    ) -> None:
        super().__init__(message, status=status, method=method, url=url, cluster=cluster)
        self.visited = tuple(visited)


class RedirectLoopError(_RedirectError):
    """A 307 pointed back to a URL already visited for this request, with the same query.

    The same broker with another query is not a loop: Pulsar's owner lookup goes broker X ->
    leader -> X with `authoritative=true` (`PulsarWebResource.validateBundleOwnership`).
    """


class TooManyRedirectsError(_RedirectError):
    """More 307 hops than `max_redirect_hops`."""


class RedirectRefusedError(_RedirectError):
    """A 307 to a host outside the peer group that the client may not follow.

    Unlisted hosts are refused when `follow_unlisted_redirects` is off, and always when the
    redirect would move the token from https to plain http.
    """


class InvalidResponseError(PulsarAdminError):
    """A success answer whose body cannot be read as what Pulsar sends."""


_BY_STATUS: dict[int, type[ClientError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    429: TooManyRequestsError,
}


def error_class_for(status: int) -> type[PulsarAdminError]:
    """The error class for an HTTP status that is neither a success nor a redirect."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 400 <= status < 500:
        return ClientError
    if status >= 500:
        return ServerError
    # 1xx or an unexpected 3xx: the server said something this client does not handle.
    return PulsarAdminError
