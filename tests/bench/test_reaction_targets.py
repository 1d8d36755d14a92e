"""Issue 36's targets in `bench.reaction_time`'s model, with the config's default schedule:
first split no later than Pulsar's, over-threshold bundle-minutes no more than the best
Pulsar model's, and no split on the one- and two-sample spikes."""

from __future__ import annotations

from typing import Any

import pytest

from balancer.core.split import SplitAlgorithm
from balancer.sim.scenarios import parse_scenario
from bench.reaction_scenarios import (
    FLASH_CROWD_SCENARIO,
    MODEST_OVERLOAD_SCENARIO,
    SPIKE_SCENARIO,
    TWO_CLUSTERS_SCENARIO,
    TWO_SAMPLE_SPIKE_SCENARIO,
)
from bench.reaction_time import (
    BEFORE_ISSUE_36,
    Sampler,
    Schedule,
    Timeline,
    default_schedule,
    run_ours,
    run_pulsar,
)

HORIZON_S = 20 * 60.0


def _sampler(spec: dict[str, Any]) -> Sampler:
    return Sampler(parse_scenario(spec, source="test"), warmup_s=600.0, calm=0.3)


def _ours(spec: dict[str, Any], schedule: tuple[int, int, int, int, bool]) -> Timeline:
    return run_ours(_sampler(spec), Schedule(*schedule), stats_interval_s=60.0, horizon_s=HORIZON_S)


def _pulsar(spec: dict[str, Any]) -> list[Timeline]:
    return [
        run_pulsar(
            _sampler(spec), algorithm=a, check_interval_s=60.0, horizon_s=HORIZON_S, label=a.value
        )
        for a in (SplitAlgorithm.RANGE_EQUALLY_DIVIDE, SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE)
    ]


def test_the_default_schedule_is_closed_by_round_markers() -> None:
    window_s, slide_s, _, trigger_s, marker = default_schedule()
    assert marker
    assert window_s == slide_s == 60  # one sample a window: hits count distinct samples
    assert trigger_s == 15


@pytest.mark.parametrize(
    "spec", [MODEST_OVERLOAD_SCENARIO, FLASH_CROWD_SCENARIO, TWO_CLUSTERS_SCENARIO]
)
def test_the_default_schedule_reacts_before_pulsar(spec: dict[str, Any]) -> None:
    ours = _ours(spec, default_schedule())
    pulsar = _pulsar(spec)
    assert ours.first_over_s is not None and ours.first_split_s is not None
    first_pulsar = min(p.first_split_s for p in pulsar if p.first_split_s is not None)
    assert ours.first_split_s <= first_pulsar
    assert ours.over_bundle_s <= min(p.over_bundle_s for p in pulsar)


def test_the_schedule_before_issue_36_was_later_than_pulsar() -> None:
    # What the targets are measured against: the old defaults lost the race.
    ours = _ours(MODEST_OVERLOAD_SCENARIO, BEFORE_ISSUE_36)
    pulsar = _pulsar(MODEST_OVERLOAD_SCENARIO)
    assert ours.first_split_s is not None
    assert ours.first_split_s > min(p.first_split_s or 1e9 for p in pulsar)


@pytest.mark.parametrize("spec", [SPIKE_SCENARIO, TWO_SAMPLE_SPIKE_SCENARIO])
def test_spikes_of_one_and_two_samples_never_split(spec: dict[str, Any]) -> None:
    ours = _ours(spec, default_schedule())
    assert ours.first_over_s is not None  # it was over threshold
    assert ours.splits == 0


def test_the_old_schedule_split_on_a_two_sample_spike() -> None:
    # A 120 s window sliding by 60 s counts the two samples in three windows.
    assert _ours(TWO_SAMPLE_SPIKE_SCENARIO, BEFORE_ISSUE_36).splits == 1
