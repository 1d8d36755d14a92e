"""`moves` config: Pulsar's default resource weights, and one unit for broker_capacity
throughput (issue 41 points 10 and 11)."""

from __future__ import annotations

import re
from pathlib import Path

from balancer.app.moves_config import CapacityConfig, MovesConfig, WeightsConfig
from balancer.core.broker_load import LoadWeights

ROOT = Path(__file__).resolve().parents[2]


def test_default_weights_are_pulsars() -> None:
    # ServiceConfiguration (3.x, 4.x): loadBalancerCPUResourceWeight,
    # ...MemoryResourceWeight (deprecated since 3.0.0, still 1.0 and still in
    # LocalBrokerData.getMaxResourceUsageWithWeight), ...DirectMemoryResourceWeight,
    # ...BandwithIn/OutResourceWeight: all 1.0.
    expected = LoadWeights(1.0, 1.0, 1.0, 1.0, 1.0)
    assert WeightsConfig().weights() == expected
    assert MovesConfig().settings().weights == expected
    assert LoadWeights() == expected


def test_throughput_capacity_is_mib_per_s_everywhere() -> None:
    # The name follows Pulsar's *Mbytes settings (x LoadManagerShared.MIBI = 2^20).
    assert CapacityConfig(max_throughput_mbytes=3).capacity().max_throughput_bytes == 3 * 2**20
    field = CapacityConfig.model_fields["max_throughput_mbytes"]
    assert field.description is not None and "MiB/s" in field.description
    for path in ("conf/balancer.yaml", "docs/operations.md"):
        lines = [
            line
            for line in (ROOT / path).read_text().splitlines()
            if "max_throughput_mbytes" in line and re.search(r"\bMi?B/s\b", line)
        ]
        assert lines, f"{path} documents max_throughput_mbytes with a unit"
        assert all("MiB/s" in line and "MB/s" not in line for line in lines), (path, lines)
