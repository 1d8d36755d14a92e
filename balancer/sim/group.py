"""A peer group of simulated clusters: build it from a scenario, start its brokers' HTTP
servers on 127.0.0.1, and stop them.

    with start_peer_group(load_scenario("conf/scenarios/hot-bundle.yaml")) as group:
        group.admin_urls            # {"east": "http://127.0.0.1:41234", ...}
        group.clock.advance(60)     # simulated time moves only when told (time_scale=0)
        group.model.splits          # every split applied
        group.faults.configure(error_rate_503=0.5)
"""

from __future__ import annotations

import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.topics import parse_topic
from balancer.sim.broker_stops import (
    RestartStep,
    start_broker,
    statefulset_order,
    stop_broker,
)
from balancer.sim.faults import FaultInjector
from balancer.sim.model import SimModel
from balancer.sim.scenarios import Scenario, load_scenario
from balancer.sim.server import BrokerServer
from balancer.sim.sim_clock import SimClock
from balancer.sim.state import NamespaceState, ShutdownMove, SimError, SplitRecord
from balancer.sim.stats import Ledger
from balancer.sim.tls import self_signed_certificate, server_context
from balancer.support.lifecycle import StopsOnExit

LOOPBACK = "127.0.0.1"


class PeerGroup:
    """The model, clock and fault injector of a peer group, not yet serving HTTP."""

    def __init__(self, scenario: Scenario, *, time_scale: float = 0.0) -> None:
        self.scenario = scenario
        self.clock = SimClock(scenario.start_ms, time_scale=time_scale)
        self.faults = FaultInjector(seed=scenario.seed)
        self.model = SimModel(scenario, self.clock, faults=self.faults)

    @classmethod
    def from_scenario(
        cls,
        scenario: Scenario | str | Path,
        *,
        seed: int | None = None,
        time_scale: float = 0.0,
    ) -> PeerGroup:
        """`scenario` is a validated `Scenario` or a YAML path; `seed` overrides its seed."""
        loaded = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        if seed is not None:
            loaded = loaded.model_copy(update={"seed": seed})
        return cls(loaded, time_scale=time_scale)

    def start(
        self, *, ports: Mapping[str, int] | None = None, required_token: str | None = None
    ) -> RunningPeerGroup:
        """Bind every broker (cluster admin port from `ports`, else OS-chosen) and serve.

        With `required_token`, every broker answers 401 unless `Authorization: Bearer <it>`.
        """
        servers: list[BrokerServer] = []
        specs = {c.name: c for c in self.scenario.clusters}
        tls_dir: Path | None = None
        try:
            context = None
            if any(spec.tls_web_port for spec in specs.values()):
                tls_dir = Path(tempfile.mkdtemp(prefix="pulsar-sim-tls-"))
                context = server_context(*self_signed_certificate(tls_dir))
            for cluster in self.model.clusters.values():
                for broker in range(cluster.broker_count):
                    port = (ports or {}).get(cluster.name, 0) if broker == 0 else 0
                    server = self._server(cluster.name, broker, port, required_token)
                    servers.append(server)
                    cluster.broker_urls.append(server.url)
                    if specs[cluster.name].tls_web_port and context is not None:
                        # webServicePortTls beside webServicePort: the id keeps the plain port.
                        secure = self._server(cluster.name, broker, 0, required_token, context)
                        servers.append(secure)
                        cluster.broker_tls_urls.append(secure.url)
                if specs[cluster.name].service_url_alias:
                    # Another port on broker 0: the same cluster under another URL.
                    alias = self._server(cluster.name, 0, 0, required_token)
                    servers.append(alias)
                    cluster.alias_url = alias.url
            for server in servers:
                server.start()
        except BaseException:
            for server in servers:
                server.server_close()
            if tls_dir is not None:
                shutil.rmtree(tls_dir, ignore_errors=True)
            raise
        return RunningPeerGroup(self, servers, tls_dir=tls_dir)

    def _server(
        self,
        cluster: str,
        broker: int,
        port: int,
        required_token: str | None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> BrokerServer:
        return BrokerServer(
            (LOOPBACK, port),
            model=self.model,
            faults=self.faults,
            cluster=cluster,
            broker=broker,
            required_token=required_token,
            ssl_context=ssl_context,
        )


# The name other modules may know it by.
SimulatedPeerGroup = PeerGroup


class RunningPeerGroup(StopsOnExit):
    """A started peer group; `stop()` (or leaving the `with` block) stops every server."""

    def __init__(
        self, group: PeerGroup, servers: list[BrokerServer], *, tls_dir: Path | None = None
    ) -> None:
        self.group = group
        self._tls_dir = tls_dir
        self.scenario = group.scenario
        self.clock = group.clock
        self.model = group.model
        self.faults = group.faults
        self._servers = servers
        self._stopped = False

    @property
    def admin_urls(self) -> dict[str, str]:
        """Cluster name -> admin (service) URL, which is its broker 0."""
        return {name: c.service_url for name, c in self.model.clusters.items()}

    @property
    def broker_urls(self) -> dict[str, list[str]]:
        """Cluster name -> every broker's URL (each serves its own broker-stats/topics)."""
        return {name: list(c.broker_urls) for name, c in self.model.clusters.items()}

    @property
    def tls_admin_urls(self) -> dict[str, str]:
        """Cluster name -> broker 0's TLS URL, for clusters whose brokers have a TLS port:
        the https admin URL an operator of such a cluster configures."""
        return {
            name: c.broker_tls_urls[0]
            for name, c in self.model.clusters.items()
            if c.broker_tls_urls
        }

    @property
    def broker_tls_urls(self) -> dict[str, list[str]]:
        """Cluster name -> each broker's webServiceUrlTls (empty without TLS ports)."""
        return {name: list(c.broker_tls_urls) for name, c in self.model.clusters.items()}

    @property
    def tls_ca_file(self) -> Path | None:
        """The self-signed certificate the TLS ports serve (a client's CA bundle)."""
        return None if self._tls_dir is None else self._tls_dir / "sim-broker.pem"

    @property
    def unauthorized_requests(self) -> int:
        """Requests answered 401 because the bearer token was missing or wrong."""
        return sum(server.unauthorized for server in self._servers)

    def rotate_token(self, token: str, *, cluster: str | None = None) -> None:
        """Every broker (of `cluster`, default all) now requires `token` (started with
        `required_token`): the old one is answered 401, as after a rotation of Pulsar's
        token secret key or the role's token."""
        for server in self._servers:
            if cluster is not None and server.cluster != cluster:
                continue
            if server.required_token is None:
                raise ValueError("the peer group was started without a required token")
            server.required_token = token

    # ----- conveniences for tests: by name, not by model index ----------------------------

    def bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's current bundle layout (`tenant/ns`)."""
        with self.model.lock:
            return self._namespace(namespace).layout

    def topics(self, namespace: str, bundle: BundleRange | str | None = None) -> list[str]:
        """Full names of the namespace's topics, or of one bundle's."""
        ns = self._namespace(namespace)
        chosen = BundleRange.parse(bundle) if isinstance(bundle, str) else bundle
        return self.model.topics_of_bundle(ns, chosen)

    def ledgers(self, topic: str) -> tuple[list[Ledger], int]:
        """A topic's ledgers oldest first (the last is the current one), current size."""
        return self.model.ledgers(self._topic_index(topic))

    def topic_stats(self, topic: str) -> dict[str, Any]:
        """What `GET .../{topic}/stats` answers now."""
        return self.model.topic_stats(self._topic_index(topic))

    def release_bundle(self, namespace: str, bundle: BundleRange | str) -> None:
        """No broker owns the bundle any more; the next owner lookup assigns it
        (`balancer.sim.ownership`)."""
        chosen = BundleRange.parse(bundle) if isinstance(bundle, str) else bundle
        self.model.release_bundle(self._namespace(namespace), chosen)

    def splits(self, namespace: str | None = None) -> list[SplitRecord]:
        """Every split applied (of one namespace), oldest first."""
        with self.model.lock:
            return [s for s in self.model.splits if namespace in (None, s.namespace)]

    def _namespace(self, namespace: str) -> NamespaceState:
        ns = self.model.namespaces.get(namespace)
        if ns is None:
            raise KeyError(f"no namespace {namespace!r} in the scenario")
        return ns

    def _topic_index(self, topic: str) -> int:
        name = parse_topic(topic)
        try:
            return self.model.topic_index(self._namespace(name.namespace_name), name.local_name)
        except SimError as exc:
            raise KeyError(exc.reason) from None

    def stop_cluster(self, cluster: str) -> None:
        """Take a cluster down: its ports stop listening (connections are refused)."""
        self.model.cluster(cluster)
        _stop_all([s for s in self._servers if s.cluster == cluster and s.serving])

    def stop_broker(
        self, cluster: str, broker: int, *, graceful: bool = True
    ) -> list[ShutdownMove]:
        """A broker stops (scaled down, or a pod restarting): no longer listed, its port
        refuses connections, the leadership handed over if it led; gracefully its bundles
        are handed on as its load manager does at shutdown (returned), killed
        (`graceful=False`) they are left unowned (`balancer.sim.broker_stops`)."""
        moves = stop_broker(self.model, cluster, broker, graceful=graceful)
        _stop_all([s for s in self._servers if (s.cluster, s.broker) == (cluster, broker)])
        return moves

    def start_broker(self, cluster: str, broker: int) -> None:
        """A stopped broker joins again under the same id and port, owning nothing."""
        start_broker(self.model, cluster, broker)
        self._restart_servers(lambda s: (s.cluster, s.broker) == (cluster, broker))

    def rolling_restart(
        self,
        cluster: str,
        order: Sequence[int] | None = None,
        *,
        down_s: float = 0.0,
        graceful: bool = True,
    ) -> list[RestartStep]:
        """Restart every broker of `cluster` one at a time, in `order` (default a
        StatefulSet's: highest ordinal first): each stopped, `down_s` simulated seconds
        down, started again; the next only once the previous is back."""
        brokers = self.model.cluster(cluster).broker_count
        steps: list[RestartStep] = []
        for broker in statefulset_order(brokers) if order is None else order:
            moves = self.stop_broker(cluster, broker, graceful=graceful)
            if down_s:
                self.clock.advance(down_s)
            self.start_broker(cluster, broker)
            steps.append(RestartStep(broker, moves))
        return steps

    def start_cluster(self, cluster: str) -> None:
        """Bring a stopped cluster back on the same ports."""
        self.model.cluster(cluster)
        self._restart_servers(lambda s: s.cluster == cluster)

    def _restart_servers(self, chosen: Callable[[BrokerServer], bool]) -> None:
        for i, old in enumerate(self._servers):
            if chosen(old) and not old.serving:
                host, port = old.server_address[:2]
                server = BrokerServer(
                    (str(host), int(port)),
                    model=self.model,
                    faults=self.faults,
                    cluster=old.cluster,
                    broker=old.broker,
                    required_token=old.required_token,
                    ssl_context=old.ssl_context,
                )
                server.start()
                self._servers[i] = server

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        _stop_all([s for s in self._servers if s.serving])
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)


def _stop_all(servers: list[BrokerServer]) -> None:
    # Stop the servers side by side: each shutdown waits up to one poll interval.
    stoppers = [threading.Thread(target=s.stop) for s in servers]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join()


@contextmanager
def start_peer_group(
    scenario: Scenario | str | Path,
    *,
    ports: Mapping[str, int] | None = None,
    seed: int | None = None,
    time_scale: float = 0.0,
    required_token: str | None = None,
) -> Iterator[RunningPeerGroup]:
    running = PeerGroup.from_scenario(scenario, seed=seed, time_scale=time_scale).start(
        ports=ports, required_token=required_token
    )
    try:
        yield running
    finally:
        running.stop()
