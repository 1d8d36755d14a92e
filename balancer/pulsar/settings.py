"""How the admin client talks to its clusters: one frozen value instead of a keyword list.

    ClientSettings(token=TokenSource(env_var="PULSAR_TOKEN"), retry=RetryPolicy(max_attempts=2))

The token is held as its source (a file or an environment variable NAME), never as the
value; `environ`, where a token may be read from, is left out of the repr.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from balancer.pulsar.auth import TlsSettings, TokenSource
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.timeouts import Timeouts

if TYPE_CHECKING:  # the transport imports these settings
    from balancer.pulsar.transport import RequestHook


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """The peer group's defaults and the client's collaborators.

    `token`, `tls` and `timeouts` apply to every cluster whose `ClusterEndpoint` sets none
    of its own. `entry_cluster` (default: the first) is asked for a namespace call that
    names no cluster and whose owner no redirect has shown yet. A 307 is followed with the
    same method and body at most `max_redirect_hops` times; one to a host outside the group
    only when `follow_unlisted_redirects`. `on_request` sees every attempt (metrics);
    `sleep`, `rng`, `monotonic`, `environ` and `http_transport` are injectable so tests do
    not wait on a real clock, a real environment or a real network.
    """

    token: TokenSource | None = None
    tls: TlsSettings | None = None
    timeouts: Timeouts | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_redirect_hops: int = 3
    entry_cluster: str | None = None
    follow_unlisted_redirects: bool = True
    on_request: RequestHook | None = field(default=None, repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    rng: random.Random | None = field(default=None, repr=False)  # None: a fresh one
    monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)
    # None: os.environ. May hold the token itself, so it never shows in a repr.
    environ: Mapping[str, str] | None = field(default=None, repr=False)
    http_transport: httpx.BaseTransport | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_redirect_hops < 0:
            raise ValueError(f"max_redirect_hops must be >= 0, got {self.max_redirect_hops}")
