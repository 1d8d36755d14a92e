"""The embedded demo's defaults point at files that exist (README's first command uses them)."""

from __future__ import annotations

from balancer.app.embedded import DEFAULT_SCENARIO
from balancer.sim import load_scenario


def test_the_default_scenario_is_the_repos_and_loads() -> None:
    assert DEFAULT_SCENARIO.is_file(), DEFAULT_SCENARIO
    assert DEFAULT_SCENARIO.parent.parent.name == "conf"
    scenario = load_scenario(DEFAULT_SCENARIO)
    assert scenario.namespaces  # something for the demo to balance
