"""Where the contract suite runs: the simulator, or a real Pulsar cluster.

A `ContractTarget` is a base admin URL, a token file and a way to prepare what a test needs
(`namespace()`), so the same test body runs against both:

- `sim`: a simulated peer group started here (east with two brokers and peer west, south
  with no peers), every broker requiring a bearer token; `namespace()` hands out one of the
  scenario's untouched namespaces.
- `pulsar`: `PULSAR_ADMIN_URL` (+ `PULSAR_ADMIN_TOKEN_FILE`, `PULSAR_ADMIN_CA_FILE`,
  `PULSAR_CLUSTER`), or with `PULSAR_CONTRACT_CONTAINER=1` a Pulsar standalone container
  started by testcontainers (`PULSAR_CONTRACT_IMAGE`). `namespace()` creates a namespace
  in the suite's OWN tenant `pulsar-balancer-contract-<random>` and topics in it through the
  admin API; `close()` deletes every topic, namespace and the tenant it made, nothing else.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.pulsar.auth import TlsSettings, TokenSource
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group
from tests.kafka_broker import docker_available

BUNDLES = 4  # every prepared namespace starts with Pulsar's default of 4 bundles
TOPICS_PER_BUNDLE = 2  # specified_positions_divide splits nothing with <= 1 topic
SIM_NAMESPACES = 20
SIM_TENANT = "contract"
MAX_HOPS = 5
# broker-stats/topics is refreshed every statsUpdateFrequencyInSecs (60 by default).
REAL_STATS_WAIT_S = float(os.environ.get("PULSAR_CONTRACT_STATS_WAIT_S", "90"))
CONTAINER_IMAGE = os.environ.get("PULSAR_CONTRACT_IMAGE", "apachepulsar/pulsar:4.0.4")
CONTAINER_START_S = 240.0


@dataclass
class Namespace:
    """A namespace prepared for one test: `tenant/ns`, its topics (full names), its bundles."""

    name: str
    topics: list[str]

    def topics_in(self, lower: int, upper: int) -> list[str]:
        return sorted(t for t in self.topics if lower <= hash_position(t) < upper)


@dataclass
class ContractTarget:
    kind: str  # "sim" | "pulsar"
    admin_url: str
    cluster: str
    token_file: Path | None
    broker_urls: list[str]  # whose broker-stats/topics to read
    tls: TlsSettings | None = None
    sim: RunningPeerGroup | None = None  # the simulated peer group (redirect tests)
    tenant: str = SIM_TENANT
    tenant_created: bool = False  # a real target's tenant: deleted at the end only if made
    _prepare: Callable[[ContractTarget], Namespace] | None = field(default=None, repr=False)
    _http: httpx.Client | None = field(default=None, repr=False)
    transport: httpx.BaseTransport | None = field(default=None, repr=False)  # tests only

    # ----- HTTP on the wire ------------------------------------------------------------------

    @property
    def http(self) -> httpx.Client:
        """A raw client: redirects are not followed (`request` follows them on purpose)."""
        if self._http is None:
            headers = {}
            if self.token_file is not None:
                token = self.token_file.read_text(encoding="utf-8").strip()
                headers["Authorization"] = f"Bearer {token}"
            verify = self.tls.httpx_verify() if self.tls is not None else True
            self._http = httpx.Client(
                timeout=30.0, headers=headers, verify=verify, transport=self.transport
            )
        return self._http

    def url(self, path: str) -> str:
        return f"{self.admin_url}{path}"

    def request(
        self, method: str, path: str, *, follow: bool = True, **kwargs: Any
    ) -> httpx.Response:
        """`method path` on the admin URL; with `follow`, 307s to another BROKER of the cluster
        are followed with the same method, body and token (httpx would drop the token on a
        change of host), as a multi-broker cluster answers for a bundle another broker owns."""
        response = self.http.request(method, self.url(path), **kwargs)
        for _ in range(MAX_HOPS):
            if not follow or response.status_code not in (307, 308):
                break
            kwargs.pop("params", None)  # the Location keeps the query
            response = self.http.request(method, response.headers["location"], **kwargs)
        return response

    def client(self) -> PulsarPeerGroup:
        """The project's own admin client on this target (one attempt, no sleeping)."""
        token = TokenSource(file=self.token_file) if self.token_file is not None else None
        settings = ClientSettings(
            token=token,
            tls=self.tls,
            retry=RetryPolicy(max_attempts=1, base_delay_s=0, max_delay_s=0),
            sleep=lambda s: None,
        )
        return PulsarPeerGroup([ClusterEndpoint(self.cluster, self.admin_url)], settings)

    # ----- preparing what a test needs ------------------------------------------------------

    def namespace(self) -> Namespace:
        """A namespace no other test touches: 4 bundles, >= 2 topics in each."""
        assert self._prepare is not None
        return self._prepare(self)

    def wait_for(self, check: Callable[[], Any], *, what: str, sim_advance_s: float = 60.0) -> Any:
        """`check()`'s first truthy result. The simulator's clock is moved on instead of
        waited for; a real cluster is polled up to REAL_STATS_WAIT_S. None on timeout."""
        if self.sim is not None:
            self.sim.clock.advance(sim_advance_s)
            return check()
        deadline = time.monotonic() + REAL_STATS_WAIT_S
        while True:
            result = check()
            if result or time.monotonic() > deadline:
                return result
            time.sleep(2.0)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


# ----- the simulator ------------------------------------------------------------------------


def sim_scenario() -> dict[str, Any]:
    topic_group = {
        "name": "t",
        "count": 24,
        "total_msg_rate_in": 240,
        "avg_msg_size_bytes": 1000,
        "initial_storage_bytes": 25_000_000,  # a few closed ledgers: something to offload
        "producers_per_topic": 2,
        "subscriptions": 1,
    }
    return {
        "name": "pulsar-contract",
        "seed": 33,
        "broker": {"ledger_max_size_bytes": 10_000_000, "offload_duration_s": 10},
        "clusters": [
            # The admin URL (broker 0) does not lead the load manager: an owner lookup hops.
            {"name": "east", "brokers": 2, "leader_broker": 1, "peers": ["west"]},
            {"name": "west", "peers": ["east"]},
            {"name": "south"},
        ],
        "namespaces": [
            *(
                {"name": f"{SIM_TENANT}/ns-{i}", "cluster": "east", "bundles": BUNDLES,
                 "topic_groups": [topic_group]}
                for i in range(SIM_NAMESPACES)
            ),
            *(
                {"name": f"{SIM_TENANT}/west-{x}", "cluster": "west", "bundles": BUNDLES,
                 "topic_groups": [topic_group]}
                for x in ("a", "b")
            ),
        ],
    }  # fmt: skip


@contextlib.contextmanager
def sim_target() -> Iterator[ContractTarget]:
    token = secrets.token_urlsafe(24)
    with (
        tempfile.TemporaryDirectory(prefix="contract-") as tmp,
        start_peer_group(parse_scenario(sim_scenario()), required_token=token) as group,
    ):
        token_file = Path(tmp) / "token"
        token_file.write_text(token)
        handed_out: list[str] = []

        def prepare(target: ContractTarget) -> Namespace:
            name = f"{SIM_TENANT}/ns-{len(handed_out)}"
            if len(handed_out) >= SIM_NAMESPACES:
                raise RuntimeError(f"raise SIM_NAMESPACES: more than {SIM_NAMESPACES} asked")
            handed_out.append(name)
            return Namespace(name, group.topics(name))

        target = ContractTarget(
            kind="sim",
            admin_url=group.admin_urls["east"],
            cluster="east",
            token_file=token_file,
            broker_urls=group.broker_urls["east"],
            sim=group,
            _prepare=prepare,
        )
        try:
            yield target
        finally:
            target.close()


# ----- a real cluster -----------------------------------------------------------------------


def real_target_reason() -> str | None:
    """Why no real-cluster run happens here (None: one is configured)."""
    if os.environ.get("PULSAR_ADMIN_URL"):
        return None
    if os.environ.get("PULSAR_CONTRACT_CONTAINER") == "1":
        return None if docker_available() else "PULSAR_CONTRACT_CONTAINER=1 but no Docker here"
    docker = "available" if docker_available() else "not available here"
    return (
        "no real Pulsar given: set PULSAR_ADMIN_URL (and PULSAR_ADMIN_TOKEN_FILE), or "
        f"PULSAR_CONTRACT_CONTAINER=1 for a standalone container (Docker: {docker})"
    )


@contextlib.contextmanager
def real_target() -> Iterator[ContractTarget]:
    url = os.environ.get("PULSAR_ADMIN_URL")
    if url:
        yield from _on_cluster(url.rstrip("/"))
        return
    from testcontainers.core.container import DockerContainer

    container = (
        DockerContainer(CONTAINER_IMAGE)
        .with_command("bin/pulsar standalone --no-functions-worker --no-stream-storage")
        .with_exposed_ports(8080)
    )
    with container:
        base = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8080)}"
        _wait_ready(base)
        yield from _on_cluster(base)


def _wait_ready(base: str) -> None:
    deadline = time.monotonic() + CONTAINER_START_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/admin/v2/tenants/public", timeout=5).status_code == 200:
                return
        time.sleep(3)
    raise RuntimeError(f"Pulsar standalone at {base} not ready after {CONTAINER_START_S} s")


def _on_cluster(
    base: str, transport: httpx.BaseTransport | None = None
) -> Iterator[ContractTarget]:
    token_path = os.environ.get("PULSAR_ADMIN_TOKEN_FILE")
    ca_file = os.environ.get("PULSAR_ADMIN_CA_FILE")
    target = ContractTarget(
        kind="pulsar",
        admin_url=base,
        cluster="",
        token_file=Path(token_path) if token_path else None,
        broker_urls=[base],  # the broker behind the admin URL: its own topics only
        tls=TlsSettings(ca_bundle=Path(ca_file)) if ca_file else None,
        tenant=f"pulsar-balancer-contract-{secrets.token_hex(4)}",
        _prepare=_create_namespace,
        transport=transport,
    )
    try:
        target.cluster = _local_cluster(target)
        created = target.request(
            "PUT",
            f"/admin/v2/tenants/{target.tenant}",
            json={"adminRoles": [], "allowedClusters": [target.cluster]},
        )
        _expect(created, 204, f"create tenant {target.tenant}")
        target.tenant_created = True
        yield target
    finally:
        try:
            if target.tenant_created:
                _delete_tenant(target)
        finally:
            target.close()


def _expect(response: httpx.Response, status: int, what: str) -> None:
    if response.status_code != status:
        raise RuntimeError(f"{what}: HTTP {response.status_code}: {response.text[:300]}")


def _local_cluster(target: ContractTarget) -> str:
    named = os.environ.get("PULSAR_CLUSTER")
    if named:
        return named
    answer = target.request("GET", "/admin/v2/clusters")
    _expect(answer, 200, "list clusters")
    clusters = [c for c in answer.json() if c != "global"]
    if len(clusters) != 1:
        raise RuntimeError(f"clusters {clusters}: set PULSAR_CLUSTER to the one asked")
    return str(clusters[0])


def _create_namespace(target: ContractTarget) -> Namespace:
    name = f"{target.tenant}/ns-{secrets.token_hex(3)}"
    created = target.request(
        "PUT", f"/admin/v2/namespaces/{name}", json={"bundles": {"numBundles": BUNDLES}}
    )
    _expect(created, 204, f"create namespace {name}")
    layout = NamespaceBundles.initial(name, BUNDLES)
    wanted = {str(b): TOPICS_PER_BUNDLE for b in layout.bundles}
    topics: list[str] = []
    i = 0
    while any(wanted.values()):  # names picked by their hash: >= 2 topics in every bundle
        topic = f"persistent://{name}/t-{i}"
        bundle = str(layout.find(hash_position(topic)))
        if wanted[bundle]:
            wanted[bundle] -= 1
            made = target.request("PUT", f"/admin/v2/persistent/{name}/t-{i}")
            _expect(made, 204, f"create topic {topic}")
            topics.append(topic)
        i += 1
    return Namespace(name, topics)


def _delete_tenant(target: ContractTarget) -> None:
    """Delete the suite's topics, namespaces and tenant (only those: all under its tenant).
    What cannot be deleted is named in a warning, never silently left behind."""
    left: list[str] = []
    listed = target.request("GET", f"/admin/v2/namespaces/{target.tenant}")
    namespaces = listed.json() if listed.status_code == 200 else []
    for ns in namespaces:
        topics = target.request("GET", f"/admin/v2/persistent/{ns}")
        for topic in topics.json() if topics.status_code == 200 else []:
            local = topic.split("/")[-1]
            gone = target.request(
                "DELETE", f"/admin/v2/persistent/{ns}/{local}", params={"force": "true"}
            )
            if gone.status_code not in (204, 404):
                left.append(f"topic {topic} (HTTP {gone.status_code})")
        gone = target.request("DELETE", f"/admin/v2/namespaces/{ns}")
        if gone.status_code not in (204, 404):
            left.append(f"namespace {ns} (HTTP {gone.status_code})")
    gone = target.request("DELETE", f"/admin/v2/tenants/{target.tenant}")
    if gone.status_code not in (204, 404):
        left.append(f"tenant {target.tenant} (HTTP {gone.status_code})")
    if left:
        warnings.warn(f"contract suite left behind: {', '.join(left)}", stacklevel=1)
