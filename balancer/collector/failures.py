"""Why a poll of one broker failed, in the few words an operator acts on."""

from __future__ import annotations

from enum import StrEnum

from balancer.pulsar.broker_addresses import BrokerUnreachableError
from balancer.pulsar.errors import (
    ForbiddenError,
    InvalidResponseError,
    ServerError,
    UnauthorizedError,
    UnavailableError,
)


class PollFailure(StrEnum):
    """The `reason` label of `pulsar_balancer_collector_poll_failures_total`."""

    UNREACHABLE = "unreachable"  # no answer: connection refused or reset
    TIMEOUT = "timeout"  # no answer in time: the client's timeout or the round's deadline
    UNAUTHORIZED = "unauthorized"  # 401 or 403: the token is wrong, expired or lacks a role
    INVALID_ANSWER = "invalid_answer"  # 2xx whose body is not what Pulsar sends
    SERVER_ERROR = "server_error"  # 5xx after the retries
    # No URL of the broker answers: where Pulsar's redirect for its id leads (or its
    # configured URL) gave nothing, or Pulsar knows no broker of that id.
    NO_BROKER_URL = "no_broker_url"
    OTHER = "other"  # another 4xx, a redirect that had to stop, anything else


def classify(exc: BaseException) -> PollFailure:
    """The reason of a failed fetch, from the admin client's typed errors."""
    if isinstance(exc, BrokerUnreachableError):
        return PollFailure.NO_BROKER_URL
    if isinstance(exc, UnauthorizedError | ForbiddenError):
        return PollFailure.UNAUTHORIZED
    if isinstance(exc, UnavailableError):
        return PollFailure.TIMEOUT if exc.timed_out else PollFailure.UNREACHABLE
    if isinstance(exc, InvalidResponseError | ValueError):
        return PollFailure.INVALID_ANSWER
    if isinstance(exc, ServerError):
        return PollFailure.SERVER_ERROR
    if isinstance(exc, TimeoutError):
        return PollFailure.TIMEOUT
    if isinstance(exc, ConnectionError):
        return PollFailure.UNREACHABLE
    return PollFailure.OTHER
