from balancer.core.broker_load import BrokerCapacity, BrokerLoad, LoadSource, LoadWeights, Resource
from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad
from balancer.core.moves.inputs import (
    InferredCapacity,
    broker_states,
    bundle_states,
    infer_capacity,
)

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
    assert capacity == InferredCapacity(max_msg_rate=100_000, max_throughput_bytes=200e6)


def test_a_weight_of_zero_leaves_that_resource_out_and_the_configured_term_fills_it() -> None:
    load = _load("b:1", cpu=0.4, bw_in=0.25, msg_rate=40_000, throughput=50e6)
    no_cpu = LoadWeights(cpu=0.0)
    assert infer_capacity(load, no_cpu) == InferredCapacity(None, 200e6)
    (state,) = broker_states([load], weights=no_cpu, configured={"b:1": CONFIGURED})
    assert state.capacity == BrokerCapacity(
        max_msg_rate=CONFIGURED.max_msg_rate, max_throughput_bytes=200e6
    )


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


BUSY = [
    _load("a:1", cpu=0.5, bw_in=0.5, msg_rate=50_000, throughput=50e6),  # 100k, 100 MB/s
    _load("b:1", cpu=0.5, bw_in=0.5, msg_rate=50_000, throughput=50e6),
]


def _capacity_of(idle: BrokerLoad) -> BrokerCapacity:
    loads = [*BUSY, idle]
    states = broker_states(loads, weights=WEIGHTS, configured={b.broker: CONFIGURED for b in loads})
    return next(s.capacity for s in states if s.broker == idle.broker)


def test_a_restarted_broker_with_a_jvm_baseline_and_a_trickle_gets_the_clusters_capacity() -> None:
    # 2.5 % cpu (the JVM's baseline) and 100 msg/s once read as a 4,000 msg/s broker: never
    # a destination. It carries no real load: it takes its cluster's median.
    idle = _load("r:1", cpu=0.025, bw_in=0.001, msg_rate=100, throughput=100e3)
    assert _capacity_of(idle) == BrokerCapacity(max_msg_rate=100_000, max_throughput_bytes=100e6)


def test_under_one_msg_per_s_is_never_an_infinite_capacity() -> None:
    # cpu 3 %, 0.5 msg/s: the msg term was infinite (the broker took 9 of 12 bundles).
    idle = _load("r:1", cpu=0.03, bw_in=0.0, msg_rate=0.5, throughput=2e6)
    capacity = _capacity_of(idle)
    assert capacity == BrokerCapacity(max_msg_rate=100_000, max_throughput_bytes=100e6)


def test_a_lightly_loaded_broker_with_a_small_share_is_not_inferred_from() -> None:
    # 6 % cpu but 1,000 msg/s against a mean of ~33k: mostly baseline, not its traffic.
    idle = _load("r:1", cpu=0.06, bw_in=0.01, msg_rate=1_000, throughput=1e6)
    assert _capacity_of(idle).max_msg_rate == 100_000


def test_each_term_is_bounded_against_the_clusters_median() -> None:
    wild = _load("w:1", cpu=0.05, bw_in=0.5, msg_rate=60_000, throughput=50e6)  # 1.2M msg/s
    loads = [*BUSY, _load("c:1", cpu=0.5, bw_in=0.5, msg_rate=50_000, throughput=50e6), wild]
    states = broker_states(loads, weights=WEIGHTS, configured={b.broker: CONFIGURED for b in loads})
    caps = {s.broker: s.capacity.max_msg_rate for s in states}
    assert caps["w:1"] == 10 * 100_000
    assert all(c < float("inf") for c in caps.values())
