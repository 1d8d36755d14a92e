from prometheus_client import CollectorRegistry

from balancer.core.broker_load import BrokerLoad, LoadSource
from balancer.core.moves.model import BlockedBroker, BlockReason, MovePlan
from balancer.ops.broker_metrics import BrokerLoadFamilies


def _load(broker: str, ratio: float, source: LoadSource = LoadSource.LOAD_REPORT) -> BrokerLoad:
    return BrokerLoad(
        cluster="east", broker=broker, window_end_ms=60_000, load_ratio=ratio, source=source
    )


def test_broker_loads_and_the_plan_become_series_and_a_gone_broker_leaves_none() -> None:
    registry = CollectorRegistry()
    families = BrokerLoadFamilies()
    registry.register(families)
    plan = MovePlan(
        cluster="east",
        window_end_ms=60_000,
        moves=(),
        loads_before={"a:1": 0.9, "b:1": 0.2},
        loads_after={"a:1": 0.9, "b:1": 0.2},
        blocked=(BlockedBroker("a:1", 0.9, BlockReason.NO_DESTINATION),),
    )
    families.set_cluster("east", [_load("a:1", 0.9), _load("b:1", 0.2, LoadSource.BUNDLES)], plan)
    value = registry.get_sample_value
    assert (
        value(
            "pulsar_balancer_broker_load_ratio",
            {"cluster": "east", "broker": "b:1", "source": "bundles"},
        )
        == 0.2
    )
    assert value("pulsar_balancer_broker_load_spread_ratio", {"cluster": "east"}) == 0.7
    assert value("pulsar_balancer_cluster_brokers_balanced", {"cluster": "east"}) == 0.0
    blocked = {"cluster": "east", "broker": "a:1", "reason": "no_destination"}
    assert value("pulsar_balancer_broker_move_blocked", blocked) == 1.0
    families.set_cluster("east", [_load("a:1", 0.5)], None)
    assert (
        value(
            "pulsar_balancer_broker_load_ratio",
            {"cluster": "east", "broker": "b:1", "source": "bundles"},
        )
        is None
    )
    assert value("pulsar_balancer_broker_move_blocked", blocked) is None
    assert value("pulsar_balancer_broker_load_spread_ratio", {"cluster": "east"}) == 0.0
