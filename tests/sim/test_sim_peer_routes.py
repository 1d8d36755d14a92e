"""The simulator's peer-group answers that follow Pulsar's source for issue 33: multi-host
ClusterData service URLs, the broker -> leader -> broker owner lookup, stats redirected to
the peer, peers 204 and topicHashPositions' ownership checks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.sim import start_peer_group
from balancer.sim.scenarios import ScenarioError, parse_scenario


def scenario(**cluster_options: Any) -> dict[str, Any]:
    west = {"name": "west", "brokers": 2, "peers": ["east"], **cluster_options}
    return {
        "name": "peer-routes",
        "seed": 3,
        "clusters": [{"name": "east", "peers": ["west"]}, west, {"name": "south"}],
        "namespaces": [
            {
                "name": "acme/west-ns",
                "cluster": "west",
                "topic_groups": [{"name": "w", "count": 20}],
            },
        ],
    }


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


SPLIT = "/admin/v2/namespaces/acme/west-ns/0x00000000_0x40000000/split"


def test_a_multi_host_service_url_lists_every_broker_and_307s_name_each_in_turn(
    http: httpx.Client,
) -> None:
    with start_peer_group(parse_scenario(scenario(multi_host_service_url=True))) as group:
        east = group.admin_urls["east"]
        brokers = group.broker_urls["west"]
        hosts = ",".join(u.removeprefix("http://") for u in brokers)
        data = http.get(f"{east}/admin/v2/clusters/west").json()
        assert data["serviceUrl"] == f"http://{hosts}"
        locations = [
            http.put(f"{east}{SPLIT}?unload=false", json=[]).headers["location"] for _ in range(3)
        ]
        # PulsarWebResource.getRedirectionUrl: one host of the list, the request's path and
        # query; the simulator starts at the last broker and goes round.
        assert locations == [
            f"{b}{SPLIT}?unload=false" for b in (brokers[1], brokers[0], brokers[1])
        ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"leader_broker": 2}, "leader_broker 2"),
        ({"multi_host_service_url": True, "service_url_alias": True}, "exclude each other"),
    ],
)
def test_bad_cluster_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(scenario(**options))
