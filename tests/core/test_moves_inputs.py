from balancer.core.broker_load import BrokerCapacity, BrokerLoad, LoadSource, LoadWeights, Resource
from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad
from balancer.core.moves.inputs import broker_states, bundle_states, infer_capacity

WEIGHTS = LoadWeights()
CONFIGURED = BrokerCapacity(max_msg_rate=1_000.0, max_throughput_bytes=1e6)


def _load(
    broker: str, *, cpu: float, bw_in: float, msg_rate: float, throughput: float
) -> BrokerLoad:
    return BrokerLoad(
        cluster="c",
        broker=broker,
        window_end_ms=60_000,
        load_ratio=max(cpu, bw_in),
        source=LoadSource.LOAD_REPORT,
        resource_ratios={Resource.CPU: cpu, Resource.BANDWIDTH_IN: bw_in},
        msg_rate=msg_rate,
        throughput_bytes=throughput,
    )


def test_capacity_is_what_the_broker_carries_at_load_one() -> None:
    capacity = infer_capacity(
        _load("b:1", cpu=0.4, bw_in=0.25, msg_rate=40_000, throughput=50e6), WEIGHTS
    )
    assert capacity == BrokerCapacity(max_msg_rate=100_000, max_throughput_bytes=200e6)


def test_a_weight_of_zero_leaves_that_resource_out() -> None:
    capacity = infer_capacity(
        _load("b:1", cpu=0.4, bw_in=0.25, msg_rate=40_000, throughput=50e6),
        LoadWeights(cpu=0.0),
    )
    assert capacity is not None
    assert capacity.max_msg_rate == float("inf")
    assert capacity.max_throughput_bytes == 200e6


def test_an_idle_broker_gets_the_median_of_its_cluster_else_the_configured_capacity() -> None:
    busy = [
        _load("a:1", cpu=0.5, bw_in=0.5, msg_rate=50_000, throughput=50e6),  # 100k, 100 MB/s
        _load("b:1", cpu=0.5, bw_in=0.5, msg_rate=100_000, throughput=150e6),  # 200k, 300 MB/s
        _load("c:1", cpu=0.5, bw_in=0.5, msg_rate=150_000, throughput=100e6),  # 300k, 200 MB/s
    ]
    idle = _load("d:1", cpu=0.0, bw_in=0.0, msg_rate=0, throughput=0)
    configured = {b.broker: CONFIGURED for b in [*busy, idle]}
    states = broker_states([idle, *busy], weights=WEIGHTS, configured=configured)
    assert [s.broker for s in states] == ["a:1", "b:1", "c:1", "d:1"]
    assert states[3].capacity == BrokerCapacity(max_msg_rate=200_000, max_throughput_bytes=200e6)
    alone = broker_states([idle], weights=WEIGHTS, configured={"d:1": CONFIGURED})
    assert alone[0].capacity == CONFIGURED


def test_bundles_without_a_known_owner_are_left_out() -> None:
    first, second = BundleRange(0, 0x8000_0000), BundleRange(0x8000_0000, 0xFFFF_FFFF)
    loads = [
        BundleLoad("c", "t/ns", second, 60_000, msg_rate_in=10, msg_rate_out=5, session_count=3),
        BundleLoad("c", "t/ns", first, 60_000, msg_rate_in=1),
        BundleLoad("c", "t/other", first, 60_000, msg_rate_in=1),
    ]
    owners = {f"t/ns/{second}": "b:1", f"t/ns/{first}": "a:1"}
    states = bundle_states(loads, owners, {f"t/ns/{second}": 1_000})
    assert [(s.name, s.owner) for s in states] == [
        (f"t/ns/{first}", "a:1"),
        (f"t/ns/{second}", "b:1"),
    ]
    assert states[1].msg_rate == 15 and states[1].sessions == 3 and states[1].last_moved_ms == 1_000
    assert states[0].last_moved_ms is None
