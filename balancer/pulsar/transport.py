"""The HTTP engine under the admin client: timeouts, retries, peer redirects, counting.

One logical call = one or more hops (a 307 moves it to a peer cluster with the same method
and body); each hop = one or more attempts (retried with backoff on no answer, 429 and 5xx;
a non-idempotent call only on 429 and on failures before the request left this host).
Every attempt is counted per (cluster, method, path template) and reported to `on_request`.
Nothing here logs or raises the token: errors carry URLs without credentials and Pulsar's
message with the token redacted.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from balancer.pulsar.auth import BearerTokenAuth, TlsSettings
from balancer.pulsar.errors import (
    InvalidResponseError,
    OutcomeUnknownError,
    PulsarAdminError,
    RedirectRefusedError,
    UnavailableError,
    error_class_for,
)
from balancer.pulsar.models import ClusterData
from balancer.pulsar.retry import is_retryable_status, parse_retry_after_s
from balancer.pulsar.routing import (
    ClusterEndpoint,
    Hop,
    PeerRouter,
    RedirectChain,
    routing_hint,
    safe_url,
)
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.timeouts import Timeouts

log = logging.getLogger("balancer.pulsar")

_REDIRECT_STATUSES = (307, 308)  # the ones that keep method and body
# ClusterData service URLs are re-read at most this often when a Location matches none.
ALIAS_REFRESH_S = 60.0
# Failures before the request left this host: even a non-idempotent call may be sent again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class RequestKey:
    """What requests are counted by: bounded labels (a path template, never a topic)."""

    cluster: str
    method: str
    path_template: str


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One HTTP attempt, as handed to the `on_request` hook (e.g. for metrics).

    `status` is None when no answer came (connection error or timeout).
    """

    cluster: str
    method: str
    path_template: str
    status: int | None
    duration_s: float
    attempt: int


RequestHook = Callable[[RequestRecord], None]


@dataclass(frozen=True, slots=True)
class Call:
    """One logical admin call before routing."""

    method: str
    path: str  # already encoded, from the admin URL's root
    path_template: str
    params: Sequence[tuple[str, str]] = ()
    json_body: object = None  # sent as JSON
    namespace: str | None = None  # routes by owner (learnt from real redirects only)
    cluster: str | None = None  # fixed cluster (cluster-scoped calls)
    url_override: str | None = None  # e.g. one broker's own web URL inside `cluster`
    home: str | None = None  # the cluster the namespace's stats came from
    # Configuration-store data (clusters, tenants, peers) that every cluster answers alike:
    # when the first cluster gives no answer, ask the next one.
    any_cluster: bool = False
    # False for calls that must not run twice (split, offload trigger): after a timeout or
    # reset once the request was sent, no retry (OutcomeUnknownError), nor after a 5xx (the
    # error is raised at once): the caller reads the state back.
    idempotent: bool = True


class AdminTransport:
    """Sends calls to a peer group; see the module docstring."""

    def __init__(
        self, clusters: Mapping[str, ClusterEndpoint], settings: ClientSettings | None = None
    ) -> None:
        s = settings if settings is not None else ClientSettings()
        self.router = PeerRouter(clusters, entry_cluster=s.entry_cluster)
        self._retry = s.retry
        self._max_redirect_hops = s.max_redirect_hops
        self._follow_unlisted = s.follow_unlisted_redirects
        self._on_request = s.on_request
        self._sleep = s.sleep
        self._rng = s.rng if s.rng is not None else random.Random()
        self._monotonic = s.monotonic
        self._counts: Counter[RequestKey] = Counter()
        self._lock = threading.Lock()
        self._aliases_read_at: float | None = None
        # One HTTP client per cluster: each cluster may have its own token, CA and timeouts,
        # and a token for one cluster must not travel to a peer.
        self._auths: dict[str, BearerTokenAuth | None] = {}
        self._http: dict[str, httpx.Client] = {}
        try:
            for name, endpoint in self.router.clusters.items():
                source = endpoint.token if endpoint.token is not None else s.token
                auth = (
                    BearerTokenAuth(source, environ=s.environ, monotonic=s.monotonic)
                    if source is not None
                    else None
                )
                tls = endpoint.tls or s.tls or TlsSettings()
                self._auths[name] = auth
                self._http[name] = httpx.Client(
                    auth=auth,
                    verify=tls.httpx_verify(),
                    timeout=(endpoint.timeouts or s.timeouts or Timeouts()).httpx(),
                    follow_redirects=False,  # we follow 307s ourselves, across clusters
                    transport=s.http_transport,
                    headers={"Accept": "application/json"},
                )
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for client in self._http.values():
            client.close()

    def __repr__(self) -> str:
        return (
            f"AdminTransport(clusters={list(self.router.clusters)}, "
            f"auth={list(self._auths.values())!r}, max_redirect_hops={self._max_redirect_hops})"
        )

    # -- counting ---------------------------------------------------------------------------

    def request_counts(self) -> dict[RequestKey, int]:
        with self._lock:
            return dict(self._counts)

    def request_count(
        self,
        *,
        cluster: str | None = None,
        method: str | None = None,
        path_template: str | None = None,
    ) -> int:
        """Attempts sent so far matching every filter given."""
        with self._lock:
            return sum(
                n
                for key, n in self._counts.items()
                if (cluster is None or key.cluster == cluster)
                and (method is None or key.method == method)
                and (path_template is None or key.path_template == path_template)
            )

    def reset_request_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._counts[RequestKey(record.cluster, record.method, record.path_template)] += 1
        if self._on_request is not None:
            try:
                self._on_request(record)
            except Exception:  # a broken metrics hook must not break admin calls
                log.exception("on_request hook failed")

    # -- sending ----------------------------------------------------------------------------

    def send(self, call: Call) -> httpx.Response:
        """Route, retry and follow redirects; a 2xx response, or a typed error."""
        if call.cluster is not None:
            start_cluster = call.cluster
        else:
            home = call.home if call.home is not None else routing_hint()
            start_cluster = self.router.start_cluster(call.namespace, home)
        if not call.any_cluster:
            return self._send_from(call, start_cluster)
        # Every cluster answers this alike: one dead cluster must not hide the answer.
        order = [start_cluster, *(c for c in self.router.clusters if c != start_cluster)]
        for i, cluster in enumerate(order):
            try:
                return self._send_from(call, cluster)
            except UnavailableError:
                if i == len(order) - 1:
                    raise
                log.warning(
                    "%s %s: cluster %s gave no answer, asking %s",
                    call.method,
                    call.path_template,
                    cluster,
                    order[i + 1],
                )
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _send_from(self, call: Call, start_cluster: str) -> httpx.Response:
        endpoint = self.router.endpoint(start_cluster)
        base = call.url_override.rstrip("/") if call.url_override else endpoint.admin_url
        first_url = str(httpx.URL(base + call.path, params=list(call.params) or None))
        chain = RedirectChain(
            first=Hop(start_cluster, first_url),
            max_hops=self._max_redirect_hops,
            method=call.method,
        )
        content = None if call.json_body is None else json.dumps(call.json_body).encode()
        headers = {"Content-Type": "application/json"} if content is not None else {}
        while True:
            hop = chain.current
            response, attempts = self._attempts(call, hop, content, headers)
            status = response.status_code
            if status in _REDIRECT_STATUSES:
                location = response.headers.get("Location")
                if not location:
                    raise InvalidResponseError(
                        f"{call.method} {safe_url(hop.url)}: {status} without a Location",
                        status=status,
                        method=call.method,
                        url=safe_url(hop.url),
                        cluster=hop.cluster,
                    )
                target = self.router.resolve_redirect(hop, location)
                if not target.listed and self._load_aliases(via=hop.cluster):
                    target = self.router.resolve_redirect(hop, location)
                self._check_unlisted(call, chain, target)
                chain.follow(target)
                log.info(
                    "%s %s: %d redirect %s -> %s",
                    call.method,
                    call.path_template,
                    status,
                    hop.label,
                    target.label,
                )
                continue
            if 200 <= status < 300:
                # Only a real cross-cluster redirect names the owner: routes that never
                # redirect answer 2xx from any cluster, from its own (maybe stale) metadata.
                crossed = hop.cluster != chain.first.cluster
                if call.namespace is not None and call.cluster is None and crossed:
                    self._learn_owner(call.namespace, hop.cluster)
                return response
            if status == 412 and call.namespace is not None:
                # No peer holds the namespace (any more): drop a stale owner. A 412 for another
                # cause (an unsupported algorithm) only costs one extra redirect next time.
                self.router.forget_owner(call.namespace)
            raise self._error(call, hop, response, attempts)

    def _check_unlisted(self, call: Call, chain: RedirectChain, target: Hop) -> None:
        """Refuse a hop to a URL the operator did not configure when it would carry the token
        down from https to http, or leave the peer group (unless allowed)."""
        if target.listed and not target.broker:
            return  # a configured admin URL: its scheme is the operator's choice
        current = httpx.URL(chain.current.url)
        downgrade = current.scheme == "https" and httpx.URL(target.url).scheme != "https"
        if downgrade or (not target.listed and not self._follow_unlisted):
            why = "from https to http" if downgrade else "to a host outside the peer group"
            raise RedirectRefusedError(
                f"{call.method} {call.path_template}: refusing a redirect {why}: "
                f"{safe_url(target.url)}",
                visited=chain.path,
                status=307,
                method=call.method,
                url=safe_url(target.url),
                cluster=chain.current.cluster,
            )

    def _load_aliases(self, *, via: str) -> bool:
        """Read every peer's ClusterData from `via` (the cluster that just redirected, so it
        answers) and record its service URLs; True if a new one was found.

        At most once per ALIAS_REFRESH_S: an unknown Location then counts as same-cluster.
        """
        if len(self.router.clusters) < 2:
            return False  # no peer to redirect to: an unknown host is a broker of this one
        now = self._monotonic()
        with self._lock:
            if self._aliases_read_at is not None and now - self._aliases_read_at < ALIAS_REFRESH_S:
                return False
            self._aliases_read_at = now
        added = False
        for name in self.router.clusters:
            call = Call(
                "GET",
                f"/admin/v2/clusters/{quote(name, safe='')}",
                "/admin/v2/clusters/{cluster}",
                cluster=via,
            )
            try:
                data = ClusterData.from_json(name, self._send_from(call, via).json())
            except (PulsarAdminError, ValueError) as exc:
                log.warning("cannot read ClusterData of %s from %s: %s", name, via, exc)
                continue
            urls = [u for u in (data.service_url, data.service_url_tls) if u]
            added = self.router.add_aliases(name, urls) or added
        return added

    def _learn_owner(self, namespace: str, cluster: str) -> None:
        previous = self.router.owner_of(namespace)
        if previous != cluster:
            self.router.remember_owner(namespace, cluster)
            log.debug("namespace %s is owned by cluster %s", namespace, cluster)

    def _attempts(
        self, call: Call, hop: Hop, content: bytes | None, headers: Mapping[str, str]
    ) -> tuple[httpx.Response, int]:
        """The answer of the last attempt on one hop, and how many attempts it took."""
        policy = self._retry
        for attempt in range(1, policy.max_attempts + 1):
            started = self._monotonic()
            try:
                response = self._http[hop.cluster].request(
                    call.method, hop.url, content=content, headers=headers
                )
            except httpx.TransportError as exc:
                self._record(
                    RequestRecord(
                        hop.cluster,
                        call.method,
                        call.path_template,
                        None,
                        self._monotonic() - started,
                        attempt,
                    )
                )
                what = f"{type(exc).__name__}"
                if not call.idempotent and not isinstance(exc, _NOT_SENT):
                    raise OutcomeUnknownError(
                        f"{call.method} {safe_url(hop.url)} (cluster {hop.cluster}): sent, no "
                        f"answer ({what}); not re-sent, outcome unknown",
                        timed_out=isinstance(exc, httpx.TimeoutException),
                        method=call.method,
                        url=safe_url(hop.url),
                        cluster=hop.cluster,
                        attempts=attempt,
                    ) from None
                if attempt >= policy.max_attempts:
                    raise UnavailableError(
                        f"{call.method} {safe_url(hop.url)} (cluster {hop.cluster}): no answer "
                        f"after {attempt} attempt(s): {what}",
                        timed_out=isinstance(exc, httpx.TimeoutException),
                        method=call.method,
                        url=safe_url(hop.url),
                        cluster=hop.cluster,
                        attempts=attempt,
                    ) from None
                delay = policy.delay_s(attempt, self._rng)
                log.warning(
                    "%s %s on cluster %s: %s (attempt %d/%d), retrying in %.3f s",
                    call.method,
                    call.path_template,
                    hop.cluster,
                    what,
                    attempt,
                    policy.max_attempts,
                    delay,
                )
                self._sleep(delay)
                continue
            elapsed = self._monotonic() - started
            status = response.status_code
            self._record(
                RequestRecord(
                    hop.cluster, call.method, call.path_template, status, elapsed, attempt
                )
            )
            log.debug(
                "%s %s on cluster %s -> %d in %.1f ms (attempt %d)",
                call.method,
                call.path_template,
                hop.cluster,
                status,
                elapsed * 1000,
                attempt,
            )
            # A 5xx may come after Pulsar acted (a split applied, then a failing unload or a
            # proxy timeout): a non-idempotent call is not sent again; the caller reads the
            # state back. A 429 is a refusal before acting: safe to send again.
            retryable = is_retryable_status(status) and (call.idempotent or status == 429)
            if retryable and attempt < policy.max_attempts:
                delay = policy.delay_s(
                    attempt,
                    self._rng,
                    retry_after_s=parse_retry_after_s(response.headers.get("Retry-After")),
                )
                log.warning(
                    "%s %s on cluster %s: HTTP %d (attempt %d/%d), retrying in %.3f s",
                    call.method,
                    call.path_template,
                    hop.cluster,
                    status,
                    attempt,
                    policy.max_attempts,
                    delay,
                )
                self._sleep(delay)
                continue
            return response, attempt
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _error(
        self, call: Call, hop: Hop, response: httpx.Response, attempts: int
    ) -> PulsarAdminError:
        status = response.status_code
        reason = self._redact(_reason_of(response))
        cls = error_class_for(status)
        url = safe_url(hop.url)
        message = f"{call.method} {url} (cluster {hop.cluster}): HTTP {status}"
        if reason:
            message += f": {reason}"
        return cls(
            message,
            status=status,
            reason=reason,
            method=call.method,
            url=url,
            cluster=hop.cluster,
            attempts=attempts,
        )

    def _redact(self, text: str) -> str:
        for auth in self._auths.values():
            if auth is not None:
                for secret in auth.secrets():
                    text = text.replace(secret.get_secret_value(), "**********")
        return text

    def token_problems(self) -> dict[str, str]:
        """Cluster -> why its token file cannot be used now (the last good token is sent)."""
        return {
            name: problem
            for name, auth in self._auths.items()
            if auth is not None and (problem := auth.token_problem) is not None
        }

    def invalid_response(
        self, call: Call, response: httpx.Response, detail: str
    ) -> InvalidResponseError:
        """The error for a 2xx answer whose body is not what Pulsar sends."""
        url = safe_url(response.request.url)
        return InvalidResponseError(
            f"{call.method} {url}: unexpected response body: {self._redact(detail)}",
            status=response.status_code,
            method=call.method,
            url=url,
        )


def _reason_of(response: httpx.Response) -> str:
    """Pulsar's `{"reason": "..."}` message, else the start of the body text."""
    text = response.text
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return str(body["reason"])[:_MAX_REASON_CHARS]
    return text.strip()[:_MAX_REASON_CHARS]
