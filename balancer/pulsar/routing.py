"""Peer-group routing (PIP-8): which cluster to ask, where a 307 leads, when to stop.

A namespace lives in one cluster of a peer group. Only some routes answer 307 from another
cluster: the ones that call Pulsar's `PulsarWebResource.validateGlobalNamespaceOwnershipAsync`
(split, unload, compaction, terminate, the non-persistent topic list, AND a topic's `/stats`
and `/internalStats`: `PersistentTopicsBase.internalGetStatsAsync` /
`internalGetInternalStatsAsync`). Reads such as GET bundles and the persistent topic list, and
a topic's offload trigger and status (topic ownership only: a cluster without the topic
answers 404), are answered by whichever cluster is asked. So a namespace call goes to: the
owner learnt from a real cross-cluster 307, else the cluster its stats came from (the
`cluster=` argument, or the enclosing `routed_to(cluster)` block), else the entry cluster.

A 307's `Location` is matched against the configured admin URLs and against every host of
the peers' ClusterData `serviceUrl`/`serviceUrlTls` (`add_aliases`; a service URL may list
several hosts, `http://h1:8080,h2:8080`, and the 307 keeps the REQUEST's scheme with one
host:port of it), which may differ from the admin URLs (a load balancer, another DNS name).
A host of another cluster leads to that cluster's admin URL; a host of the current cluster
is one of its brokers (the owner lookup) and is followed as sent. A `RedirectChain` stops a
request when the same URL with the same query comes back (inside a cluster the owner lookup
goes broker X -> leader -> X with `authoritative=true`: not a loop) or when it takes too
many hops. No I/O here: the client does the HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

import httpx

from balancer.pulsar.auth import TlsSettings, TokenSource
from balancer.pulsar.errors import RedirectLoopError, TooManyRedirectsError
from balancer.pulsar.timeouts import Timeouts


class RoutingConfigError(ValueError):
    """A peer-group definition that cannot work."""


# The cluster whose stats the current work is about (a decision's cluster). A context
# variable, so every admin call made inside a decision routes there, however deep the call.
_HOME: ContextVar[str | None] = ContextVar("pulsar_home_cluster", default=None)


@contextmanager
def routed_to(cluster: str | None) -> Iterator[None]:
    """Namespace calls in this block (without their own `cluster=`) go to `cluster`."""
    token = _HOME.set(cluster)
    try:
        yield
    finally:
        _HOME.reset(token)


def routing_hint() -> str | None:
    """The cluster of the enclosing `routed_to` block, if any."""
    return _HOME.get()


@dataclass(frozen=True, slots=True)
class ClusterEndpoint:
    """One cluster of the peer group: its Pulsar cluster name and its admin (web service) URL.

    `admin_url` is the base URL, e.g. `https://pulsar-a.example:8443`; a path prefix is kept
    (for a proxy). A trailing slash is dropped. `token`, `tls` and `timeouts` override the
    peer group's defaults for this cluster (each cluster may have its own credentials).
    """

    name: str
    admin_url: str
    token: TokenSource | None = None
    tls: TlsSettings | None = None
    timeouts: Timeouts | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip() or "/" in self.name:
            raise RoutingConfigError(f"invalid cluster name {self.name!r}")
        try:
            url = httpx.URL(self.admin_url)
        except httpx.InvalidURL as exc:
            raise RoutingConfigError(f"cluster {self.name}: invalid admin_url: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise RoutingConfigError(
                f"cluster {self.name}: admin_url must be http(s)://host[:port][/prefix]"
            )
        if url.userinfo:
            # Credentials in URLs end up in logs; the token comes from TokenSource instead.
            raise RoutingConfigError(f"cluster {self.name}: admin_url must not hold credentials")
        if url.query or url.fragment:
            raise RoutingConfigError(f"cluster {self.name}: admin_url must not have a query")
        object.__setattr__(self, "admin_url", str(url).rstrip("/"))

    def url(self, path: str) -> str:
        """The absolute URL of an already-encoded path starting with `/`."""
        return f"{self.admin_url}{path}"

    def serves(self, url: httpx.URL) -> bool:
        """Whether `url` points at this cluster's admin endpoint (same origin and prefix)."""
        return _under(self.admin_url, url)


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _under(base_url: str, url: httpx.URL) -> bool:
    """Whether `url` is `base_url` or below it (same scheme, host, port and path prefix)."""
    base = httpx.URL(base_url)
    if (url.scheme, url.host, url.port or _default_port(url.scheme)) != (
        base.scheme,
        base.host,
        base.port or _default_port(base.scheme),
    ):
        return False
    prefix = base.path.rstrip("/")
    return url.path == prefix or url.path.startswith(prefix + "/")


def origin_of(url: httpx.URL) -> str:
    """`scheme://host:port` of a URL, with no credentials, path or query."""
    return f"{url.scheme}://{url.host}:{url.port or _default_port(url.scheme)}"


def service_url_hosts(service_url: str) -> tuple[str, ...]:
    """Every `scheme://host:port[/prefix]` a ClusterData service URL names.

    Pulsar's `PulsarServiceNameResolver` takes `http://h1:8080,h2:8080` (one scheme, several
    hosts); httpx rejects that as one URL. Credentials, query and fragment are dropped; a host
    that does not parse is skipped, so bad input gives fewer aliases, never an error.
    """
    scheme, sep, rest = service_url.strip().partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return ()
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, prefix = rest[:cut], rest[cut:].split("?", 1)[0].split("#", 1)[0].rstrip("/")
    hosts: list[str] = []
    for host in authority.rpartition("@")[2].split(","):
        try:
            url = httpx.URL(f"{scheme.lower()}://{host.strip()}{prefix}")
        except httpx.InvalidURL:
            continue
        if url.host:
            hosts.append(f"{origin_of(url)}{url.raw_path.decode('ascii').rstrip('/')}")
    return tuple(dict.fromkeys(hosts))


def _alias_serves(alias: str, url: httpx.URL) -> bool:
    """Whether `url` is on the alias's host and port and under its path prefix, whatever its
    scheme: a 307 to a peer keeps the REQUEST's scheme and takes the host and port of the
    peer's service URL (`PulsarWebResource.getRedirectionUrl`)."""
    base = httpx.URL(alias)
    if (url.host, url.port or _default_port(url.scheme)) != (
        base.host,
        base.port or _default_port(base.scheme),
    ):
        return False
    prefix = base.path.rstrip("/")
    return url.path == prefix or url.path.startswith(prefix + "/")


def safe_url(url: httpx.URL | str) -> str:
    """A URL fit for logs and errors: credentials and fragment removed."""
    parsed = httpx.URL(url) if isinstance(url, str) else url
    return str(parsed.copy_with(username=None, password=None, fragment=None))


def loop_key(url: str) -> str:
    """What makes two hops "the same" for loop detection: origin, path and the query's
    parameters (order-free). Pulsar's owner lookup sends a request back to the broker it came
    from with `authoritative=true` added (`PulsarWebResource.validateBundleOwnership`): that
    is a new request, not a loop."""
    parsed = httpx.URL(url)
    query = sorted(parse_qsl(parsed.query.decode("ascii", "replace"), keep_blank_values=True))
    return f"{origin_of(parsed)}{parsed.raw_path.split(b'?', 1)[0].decode('ascii')}?{query}"


@dataclass(frozen=True, slots=True)
class Hop:
    """Where one attempt of a request went: the cluster it is attributed to, and the URL.

    `listed` is False for a redirect to a host that is not a configured admin URL nor a
    service URL of a cluster's ClusterData (in real Pulsar, the owner broker inside the same
    cluster); it is attributed to the cluster that sent the redirect. `broker` is True for a
    redirect inside a cluster to one of the hosts its ClusterData names, followed as sent.
    """

    cluster: str
    url: str
    listed: bool = True
    broker: bool = False

    @property
    def label(self) -> str:
        """The hop in logs and errors: the cluster, with the host when not its admin URL."""
        if self.listed and not self.broker:
            return self.cluster
        return f"{self.cluster}@{origin_of(httpx.URL(self.url))}"

    @property
    def visit_key(self) -> str:
        return loop_key(self.url)


@dataclass(slots=True)
class RedirectChain:
    """The hops of one logical request; raises when the same URL with the same query comes
    back (a loop) or the hops exceed the limit."""

    first: Hop
    max_hops: int
    method: str = ""
    hops: list[Hop] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.hops = [self.first]

    @property
    def current(self) -> Hop:
        return self.hops[-1]

    @property
    def path(self) -> list[str]:
        """The hops' labels, in order (what errors call `visited`)."""
        return [h.label for h in self.hops]

    def follow(self, target: Hop) -> None:
        """Add the redirect target, or raise RedirectLoopError / TooManyRedirectsError."""
        route = " -> ".join([*self.path, target.label])
        if any(h.visit_key == target.visit_key for h in self.hops):
            raise RedirectLoopError(
                f"{self.method} redirect loop: {route} ({safe_url(target.url)} again, same query)",
                visited=self.path,
                status=307,
                method=self.method,
                url=safe_url(target.url),
                cluster=self.current.cluster,
            )
        if len(self.hops) - 1 >= self.max_hops:
            raise TooManyRedirectsError(
                f"{self.method} took more than {self.max_hops} redirect hop(s): {route}",
                visited=self.path,
                status=307,
                method=self.method,
                url=safe_url(target.url),
                cluster=self.current.cluster,
            )
        self.hops.append(target)


class PeerRouter:
    """The clusters of a peer group and the namespace owners learnt so far (thread-safe)."""

    def __init__(
        self, clusters: Mapping[str, ClusterEndpoint], *, entry_cluster: str | None = None
    ) -> None:
        if not clusters:
            raise RoutingConfigError("a peer group needs at least one cluster")
        for key, endpoint in clusters.items():
            if key != endpoint.name:
                raise RoutingConfigError(
                    f"cluster key {key!r} does not match its endpoint name {endpoint.name!r}"
                )
        if entry_cluster is not None and entry_cluster not in clusters:
            raise RoutingConfigError(f"entry cluster {entry_cluster!r} is not in the peer group")
        self._clusters = dict(clusters)
        self._entry = entry_cluster if entry_cluster is not None else next(iter(clusters))
        self._owners: dict[str, str] = {}
        self._aliases: dict[str, str] = {}  # ClusterData service URL -> cluster name
        self._lock = threading.Lock()

    @property
    def clusters(self) -> Mapping[str, ClusterEndpoint]:
        return dict(self._clusters)

    @property
    def entry_cluster(self) -> str:
        """Where a request for a namespace of unknown owner starts."""
        return self._entry

    def endpoint(self, cluster: str) -> ClusterEndpoint:
        try:
            return self._clusters[cluster]
        except KeyError:
            raise RoutingConfigError(
                f"unknown cluster {cluster!r} (peer group: {', '.join(self._clusters)})"
            ) from None

    def owner_of(self, namespace: str) -> str | None:
        with self._lock:
            return self._owners.get(namespace)

    def remember_owner(self, namespace: str, cluster: str) -> None:
        with self._lock:
            self._owners[namespace] = cluster

    def forget_owner(self, namespace: str) -> None:
        with self._lock:
            self._owners.pop(namespace, None)

    def start_cluster(self, namespace: str | None, home: str | None = None) -> str:
        """The owner learnt from a redirect, else `home` (where the stats came from), else
        the entry cluster."""
        if namespace is not None:
            owner = self.owner_of(namespace)
            if owner is not None:
                return owner
        if home is not None:
            self.endpoint(home)  # an unknown cluster is a configuration error, not a guess
            return home
        return self._entry

    def add_aliases(self, cluster: str, urls: Iterable[str]) -> bool:
        """Record a cluster's ClusterData service URLs (each host of a multi-host one); True
        if one was new."""
        self.endpoint(cluster)
        added = False
        with self._lock:
            for url in urls:
                for base in service_url_hosts(url):
                    if self._aliases.get(base) != cluster:
                        self._aliases[base] = cluster
                        added = True
        return added

    def aliases(self) -> dict[str, str]:
        with self._lock:
            return dict(self._aliases)

    def resolve_redirect(self, current: Hop, location: str) -> Hop:
        """The hop a 307 `Location` leads to (a relative Location stays on the same host).

        A Location on a host of another cluster's ClusterData service URL is sent to that
        cluster's configured admin URL (same path below the prefix, same query): the
        operator's URL is the one known to reach it with its own token and CA. A host of the
        current cluster's own service URL is one of its brokers (the owner lookup names it):
        followed as sent, with this cluster's token.
        """
        target = httpx.URL(current.url).join(location)
        for endpoint in self._clusters.values():
            if endpoint.serves(target):
                return Hop(endpoint.name, str(target), listed=True)
        for base, cluster in self.aliases().items():
            if _alias_serves(base, target):
                if cluster == current.cluster:
                    return Hop(cluster, str(target), listed=True, broker=True)
                prefix = len(httpx.URL(base).raw_path.rstrip(b"/"))
                rest = target.raw_path[prefix:].decode("ascii")  # path and query
                return Hop(cluster, self._clusters[cluster].url(rest or "/"), listed=True)
        return Hop(current.cluster, str(target), listed=False)
