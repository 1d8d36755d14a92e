"""Values of the simulated peer group's state: clusters, namespaces, the records of what
was applied, and the outcomes the admin API turns into HTTP errors and redirects."""

from __future__ import annotations

from dataclasses import dataclass, field

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.sim.traffic import IntArray


class SimError(Exception):
    """An answer Pulsar gives as an HTTP error: status and the `reason` of its JSON body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


class PeerRedirect(Exception):
    """The namespace lives on this peer cluster: answer 307 to its service URL."""

    def __init__(self, cluster: str) -> None:
        super().__init__(cluster)
        self.cluster = cluster


class OwnerRedirect(Exception):
    """Another broker of the cluster owns the bundle (or is the leader to ask): answer 307 to
    that broker with `authoritative` set to this value (PulsarWebResource.validateBundleOwnership
    replaces the query parameter with whether the redirecting broker is the leader)."""

    def __init__(self, cluster: str, broker: int, *, authoritative: bool = False) -> None:
        super().__init__(f"{cluster}/{broker}")
        self.cluster = cluster
        self.broker = broker
        self.authoritative = authoritative


@dataclass(frozen=True)
class ShutdownMove:
    """One bundle a stopping broker gave up at its shutdown and where Pulsar put it (None:
    no broker was left to take it)."""

    time_ms: int
    cluster: str
    namespace: str
    bundle: BundleRange
    source: int
    destination: int | None
    load_manager: str


@dataclass
class ClusterState:
    name: str
    broker_count: int
    peers: list[str]
    broker_urls: list[str] = field(default_factory=list)  # set once the servers are bound
    # Each broker's webServiceUrlTls (`https://127.0.0.1:port`) when the brokers also listen
    # on a TLS port (`ClusterSpec.tls_web_port`); the broker id keeps the plain port.
    broker_tls_urls: list[str] = field(default_factory=list)
    alias_url: str = ""  # a second listener of broker 0, advertised in ClusterData if set
    multi_host: bool = False  # ClusterData serviceUrl lists every broker
    leader: int = 0  # the broker leading the load manager (owner lookups go through it)
    # ModularLoadManagerImpl.bundleBrokerAffinityMap in the leader's memory: destinations kept
    # by unloads with destinationBroker, KEYED BY THE BARE BUNDLE RANGE `0x..._0x..` (as
    # NamespacesBase.setNamespaceBundleAffinityAsync passes it; apache/pulsar PR #25518 keys
    # it by the full bundle only in new releases): the next lookup of ANY unowned bundle
    # with that range, in any namespace of the cluster, uses it up -> broker index.
    affinity: dict[str, int] = field(default_factory=dict)
    _redirects: int = 0  # 307s to this cluster so far (which host of a multi-host URL)
    stopped: set[int] = field(default_factory=set)  # brokers that left (broker_stops.py)
    # Every bundle a stopping broker handed on at its shutdown, oldest first (broker_stops.py).
    shutdown_moves: list[ShutdownMove] = field(default_factory=list)

    @property
    def service_url(self) -> str:
        """The admin URL (broker 0): what an operator configures."""
        return self.broker_urls[0] if self.broker_urls else ""

    @property
    def advertised_url(self) -> str:
        """ClusterData `serviceUrl`, which 307s to this cluster carry (Pulsar's
        `PulsarWebResource.validateGlobalNamespaceOwnershipAsync` redirects to it)."""
        if self.multi_host and self.broker_urls:
            hosts = ",".join(self.broker_address(b) for b in range(len(self.broker_urls)))
            return f"http://{hosts}"
        return self.alias_url or self.service_url

    def redirect_origin(self) -> str:
        """`http://host:port` a 307 to this cluster names: PulsarWebResource.getRedirectionUrl
        keeps the request's scheme (always http here) and takes the host and port that
        PulsarServiceNameResolver.resolveHostUri picks from the serviceUrl. Pulsar starts at a
        random host and goes round; this starts at the LAST broker (not the admin URL) and
        goes round, so tests are repeatable."""
        if not (self.multi_host and self.broker_urls):
            return self.advertised_url
        count = len(self.broker_urls)
        broker = (count - 1 + self._redirects) % count
        self._redirects += 1
        return self.broker_urls[broker]

    def broker_index(self, broker_id: str) -> int | None:
        """The broker whose id (`host:port`, the plain web port) is `broker_id`, if any."""
        for broker in range(len(self.broker_urls)):
            if self.broker_address(broker) == broker_id:
                return broker
        return None

    def web_service_url_tls(self, broker: int) -> str | None:
        """The broker's registered webServiceUrlTls (None without a TLS port)."""
        return self.broker_tls_urls[broker] if broker < len(self.broker_tls_urls) else None

    def broker_address(self, broker: int) -> str:
        """`host:port` of a broker, as Pulsar names brokers."""
        if broker < len(self.broker_urls):
            return self.broker_urls[broker].removeprefix("http://")
        return f"broker-{broker}"


@dataclass
class NamespaceState:
    name: str  # tenant/ns
    cluster: str
    layout: NamespaceBundles
    owners: dict[BundleRange, int]  # bundle -> broker index in the cluster
    topic_indices: IntArray  # sorted by hash position
    sorted_positions: IntArray
    local_index: dict[str, int]  # local topic name -> global topic index
    partitioned: dict[str, int]  # partitioned base local name -> partitions
    topic_buckets: int | None
    # Bundles no broker owns (released): the next lookup assigns them. `owners` keeps the
    # last owner of each so every bundle still has an int there.
    unowned: set[BundleRange] = field(default_factory=set)

    @property
    def tenant(self) -> str:
        return self.name.split("/", 1)[0]


@dataclass(frozen=True)
class SplitRecord:
    """One split applied: the parent is gone, the children replace it."""

    time_ms: int
    cluster: str
    namespace: str
    parent: BundleRange
    children: tuple[BundleRange, ...]
    algorithm: str
    boundaries: tuple[int, ...]
    unloaded: bool


@dataclass(frozen=True)
class NoopSplit:
    """A split request answered 204 with no valid boundary: nothing changed."""

    time_ms: int
    namespace: str
    bundle: BundleRange
    algorithm: str


@dataclass(frozen=True)
class UnloadRecord:
    time_ms: int
    namespace: str
    bundle: BundleRange
    from_broker: int
    to_broker: int
