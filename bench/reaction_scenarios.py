"""Built-in cases of `bench.reaction_time` (issue 36), besides the shipped scenario files.

Each is a scenario dict (`balancer.sim.scenarios` format). The bench runs it after its calm
warm-up (10 simulated minutes at 0.3x the opening load), so scenario time 0 is t = 600 s.
Pulsar's default msgRate threshold is 30,000 msg/s (in + out) per bundle; with one
subscription a topic's out rate equals its in rate, so a namespace of 4 bundles at
`total_msg_rate_in` R has about R / 2 per bundle.

Two transients, for which the right reaction is no split (splits are never undone):
- `one-minute-spike`: a namespace at ~65 % of the threshold doubles for one stats sample;
- `two-sample-spike`: the same for two consecutive samples.

Overloads:
- `modest-overload`: a namespace goes from ~65 % to a little over the threshold (1.1x on
  average, its bundles between ~1.0x and 1.2x by the Zipf spread) and stays there, with 3 %
  noise a sample;
- `flash-crowd`: a namespace at ~50 % jumps to 4x in one sample and stays there;
- `slow-ramp`: a namespace ramps from ~60 % to 2x the threshold over 30 minutes;
- `two-clusters-two-namespaces`: one overloaded namespace in each of two clusters, the
  second 3 minutes after the first.
"""

from __future__ import annotations

from typing import Any


def _namespace(
    name: str, cluster: str, rate_in: float, changes: list[dict[str, Any]], *, topics: int = 200
) -> dict[str, Any]:
    return {
        "name": name,
        "cluster": cluster,
        "bundles": 4,
        "topic_groups": [
            {"name": "x", "count": topics, "total_msg_rate_in": rate_in, "zipf_exponent": 0.8}
        ],
        "changes": changes,
    }


def _spike(name: str, samples: int, seed: int) -> dict[str, Any]:
    return {
        "name": name,
        "seed": seed,
        "clusters": [{"name": "c1"}],
        "namespaces": [
            _namespace(
                "t/ns",
                "c1",
                40000,
                [
                    {"kind": "step", "at_s": 600, "factor": 2.0},
                    {"kind": "step", "at_s": 600 + 60 * samples, "factor": 0.5},
                ],
            )
        ],
    }


# A transient, not an overload: doubles for one stats sample (60 s) and goes back.
SPIKE_SCENARIO: dict[str, Any] = _spike("one-minute-spike (built in)", 1, 2)
# Two consecutive samples over: still a transient for a hit count of 3 distinct samples.
TWO_SAMPLE_SPIKE_SCENARIO: dict[str, Any] = _spike("two-sample-spike (built in)", 2, 3)

MODEST_OVERLOAD_SCENARIO: dict[str, Any] = {
    "name": "modest-overload (built in)",
    "seed": 11,
    "noise_pct": 3.0,
    "clusters": [{"name": "c1"}],
    "namespaces": [
        _namespace("t/modest", "c1", 40000, [{"kind": "step", "at_s": 300, "factor": 1.7}])
    ],
}

FLASH_CROWD_SCENARIO: dict[str, Any] = {
    "name": "flash-crowd (built in)",
    "seed": 12,
    "clusters": [{"name": "c1"}],
    "namespaces": [
        _namespace("t/crowd", "c1", 30000, [{"kind": "step", "at_s": 300, "factor": 4.0}]),
        _namespace("t/calm", "c1", 20000, []),
    ],
}

SLOW_RAMP_SCENARIO: dict[str, Any] = {
    "name": "slow-ramp (built in)",
    "seed": 13,
    "clusters": [{"name": "c1"}],
    "namespaces": [
        _namespace(
            "t/ramp",
            "c1",
            36000,
            [{"kind": "ramp", "from_s": 300, "to_s": 2100, "factor": 3.4}],
        )
    ],
}

TWO_CLUSTERS_SCENARIO: dict[str, Any] = {
    "name": "two-clusters-two-namespaces (built in)",
    "seed": 14,
    "clusters": [{"name": "east"}, {"name": "west"}],
    "namespaces": [
        _namespace("a/east-ns", "east", 36000, [{"kind": "step", "at_s": 300, "factor": 2.5}]),
        _namespace("a/west-ns", "west", 36000, [{"kind": "step", "at_s": 480, "factor": 3.0}]),
    ],
}

# In the order the bench prints them, after the scenario files.
BUILT_IN: tuple[dict[str, Any], ...] = (
    MODEST_OVERLOAD_SCENARIO,
    FLASH_CROWD_SCENARIO,
    SLOW_RAMP_SCENARIO,
    TWO_CLUSTERS_SCENARIO,
    SPIKE_SCENARIO,
    TWO_SAMPLE_SPIKE_SCENARIO,
)
