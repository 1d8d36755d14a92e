"""A peer group of simulated clusters: build it from a scenario, start its brokers' HTTP
servers on 127.0.0.1, and stop them.

    with start_peer_group(load_scenario("conf/scenarios/hot-bundle.yaml")) as group:
        group.admin_urls            # {"east": "http://127.0.0.1:41234", ...}
        group.clock.advance(60)     # simulated time moves only when told (time_scale=0)
        group.model.splits          # every split applied
        group.faults.configure(error_rate_503=0.5)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from balancer.sim.clock import SimClock
from balancer.sim.faults import FaultInjector
from balancer.sim.model import SimModel
from balancer.sim.scenarios import Scenario, load_scenario
from balancer.sim.server import BrokerServer

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
        try:
            for cluster in self.model.clusters.values():
                for broker in range(cluster.broker_count):
                    port = (ports or {}).get(cluster.name, 0) if broker == 0 else 0
                    server = BrokerServer(
                        (LOOPBACK, port),
                        model=self.model,
                        faults=self.faults,
                        cluster=cluster.name,
                        broker=broker,
                        required_token=required_token,
                    )
                    servers.append(server)
                    cluster.broker_urls.append(server.url)
            for server in servers:
                server.start()
        except BaseException:
            for server in servers:
                server.server_close()
            raise
        return RunningPeerGroup(self, servers)


# The name other modules may know it by.
SimulatedPeerGroup = PeerGroup


class RunningPeerGroup:
    """A started peer group; `stop()` (or leaving the `with` block) stops every server."""

    def __init__(self, group: PeerGroup, servers: list[BrokerServer]) -> None:
        self.group = group
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
    def unauthorized_requests(self) -> int:
        """Requests answered 401 because the bearer token was missing or wrong."""
        return sum(server.unauthorized for server in self._servers)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # Stop the servers side by side: each shutdown waits up to one poll interval.
        stoppers = [threading.Thread(target=s.stop) for s in self._servers]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()

    def __enter__(self) -> RunningPeerGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
