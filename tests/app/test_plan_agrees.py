"""`plan` and `run` agree: for the same simulator state, the splits and offloads the plan
proposes are exactly those the controller (in apply mode, in-process) applies to Pulsar."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from balancer.app.commands.plan import live_plan, take_samples
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler, controller_settings
from balancer.app.pulsar_wiring import peer_group_from_config
from balancer.controller.clock import FakeClock
from balancer.core.decisions import DecisionKind
from balancer.core.planning import large_topics, window_loads
from balancer.core.results import ActionResult
from balancer.sim import start_peer_group
from tests.reports import batch_report

HOT = Path("conf/scenarios/hot-bundle.yaml")
GROWTH = Path("conf/scenarios/offload-growth.yaml")


def config_for(group: Any, tmp_path: Path, **sections: Any) -> BalancerConfig:
    controller = {
        "mode": "apply",
        "journal_path": str(tmp_path / "journal.sqlite3"),
        "audit_log_path": str(tmp_path / "audit.jsonl"),
        **sections.pop("controller", {}),
    }
    return BalancerConfig.from_mapping(
        {
            "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
            "controller": controller,
            **sections,
        }
    )


@pytest.mark.parametrize(
    ("scenario", "sections"),
    [
        (HOT, {}),
        (GROWTH, {"offload": {"default_threshold": "1G"}}),
        # A per-namespace override lowers the limit: more bundles over it, more children.
        (HOT, {"thresholds": {"overrides": [{"namespace": "public/*", "max_msg_rate": 12000}]}}),
        # Outside the allow-list: the plan proposes nothing there, and nothing is applied.
        (
            GROWTH,
            {
                "offload": {"default_threshold": "1G"},
                "controller": {"allow_namespaces": ["other/*"]},
            },
        ),
    ],
)
def test_the_controller_applies_exactly_what_the_plan_proposes(
    tmp_path: Path, scenario: Path, sections: dict[str, Any]
) -> None:
    with start_peer_group(scenario) as group:
        config = config_for(group, tmp_path, **sections)
        plan, points, _errors, _moves = live_plan(
            config,
            samples=2,
            interval_s=0,
            sleep=lambda s: None,
            allows=controller_settings(config).allows,
        )
        assert plan.has_proposals or plan.skipped
        with peer_group_from_config(config) as admin:
            samples = take_samples(admin, config, samples=2, interval_s=0, sleep=lambda s: None)
            bundles = window_loads(samples)
            handler = build_handler(config, admin, clock=FakeClock())
            applied_offloads = []
            # The run needs `hit_count_threshold` consecutive windows with this load.
            for i in range(config.detection.hit_count_threshold):
                end_ms = 1_800_000_000_000 + i * 60_000
                handler.handle(
                    batch_report(
                        batch_id=i,
                        window_end_ms=end_ms,
                        bundles=tuple(replace(b, window_end_ms=end_ms) for b in bundles),
                        large_topics=tuple(large_topics(bundles, config.thresholds_model())),
                    )
                )
                applied_offloads += [
                    (o.decision.topic, o.pulsar["message_id"])
                    for o in handler.last_outcomes
                    # A 204 only starts an offload: the trigger the plan proposed was sent.
                    if o.kind is DecisionKind.OFFLOAD and o.result is ActionResult.STARTED
                ]
            handler.close()
        applied_splits = [(s.cluster, s.namespace, s.parent, s.boundaries) for s in group.splits()]
    planned_splits = [(s.cluster, s.namespace, s.bundle, s.boundaries) for s in plan.splits]
    assert applied_splits == planned_splits
    planned_offloads = [(o.topic, points[o.decision_id].message_id) for o in plan.offloads]
    # An offload is sent once; the later windows find it running or done.
    assert applied_offloads == planned_offloads
