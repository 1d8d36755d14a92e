"""`GET /admin/v2/broker-stats/metrics` read as a broker's load (issue 41 point 9): the
entries BrokerLoadData.toMetrics writes, as ExtensibleLoadManagerImplTest expects them."""

from __future__ import annotations

import pytest

from balancer.core.broker_load import LoadSource, Resource
from balancer.pulsar.broker_models import parse_load_metrics
from balancer.pulsar.parsing import ResponseShapeError

# ExtensibleLoadManagerImplTest.testGetMetrics, as JSON (Metrics {metrics, dimensions}).
BODY = [
    {"metrics": {"jvm_heap_used": 1.0}, "dimensions": {"metric": "jvm"}},
    {
        "metrics": {
            "brk_lb_bandwidth_in_usage": 3.0,
            "brk_lb_bandwidth_out_usage": 4.0,
            "brk_lb_cpu_usage": 1.0,
            "brk_lb_directMemory_usage": 2.0,
            "brk_lb_memory_usage": 400.0,
        },
        "dimensions": {"broker": "localhost", "metric": "loadBalancing"},
    },
    {
        "metrics": {"brk_lb_resource_usage": 4.0},
        "dimensions": {"broker": "localhost", "feature": "max_ema", "metric": "loadBalancing"},
    },
    {
        "metrics": {"brk_lb_unload_broker_total": 2, "brk_lb_unload_bundle_total": 3},
        "dimensions": {"broker": "localhost", "metric": "bundleUnloading"},
    },
]


def test_the_load_balancing_usages_are_the_brokers_resources_in_percent() -> None:
    report = parse_load_metrics(BODY, cluster="c", broker="localhost:8080", read_at_ms=7)
    assert report.origin is LoadSource.METRICS and report.timestamp_ms == 7
    ratios = {r: u.ratio for r, u in report.resources.items()}
    assert ratios == {
        Resource.CPU: 0.01,
        Resource.DIRECT_MEMORY: 0.02,
        Resource.BANDWIDTH_IN: 0.03,
        Resource.BANDWIDTH_OUT: 0.04,
        Resource.MEMORY: 4.0,
    }


@pytest.mark.parametrize(
    "body",
    [
        {},
        [],
        [BODY[0], BODY[2]],  # only the EMA: not the usages
        [{"metrics": {"brk_lb_cpu_usage": "x"}, "dimensions": {"metric": "loadBalancing"}}],
    ],
)
def test_no_usages_is_a_shape_error(body: object) -> None:
    with pytest.raises(ResponseShapeError):
        parse_load_metrics(body, cluster="c", broker="b:1", read_at_ms=0)
