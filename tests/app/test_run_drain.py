"""`run`'s handler draining a simulated broker (issue 43, point 2): with a broker marked
draining through `draining_of`, each window moves at most `drain_moves_in_flight_per_broker`
bundles off it, never one onto it, each verified where it landed, until it owns nothing;
the drain's progress is counted."""

from __future__ import annotations

import time
from pathlib import Path

from balancer.app.commands.plan import take_samples
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler
from balancer.app.pulsar_wiring import peer_group_from_config
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.core.moves.model import MoveReason
from balancer.core.planning import window_loads
from balancer.sim import start_peer_group
from tests.app.test_plan_drain import CLUSTER, even_scenario, owned
from tests.reports import batch_report


def test_run_empties_a_draining_broker_at_its_pace(tmp_path: Path) -> None:
    with start_peer_group(even_scenario()) as group:
        target = group.model.cluster(CLUSTER).broker_address(0)
        config = BalancerConfig.from_mapping(
            {
                "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
                "controller": {
                    "mode": "apply",
                    "journal_path": str(tmp_path / "journal.sqlite3"),
                    "audit_log_path": str(tmp_path / "audit.jsonl"),
                    "writer_lease": {"enabled": False},
                },
                "moves": {"drain_moves_in_flight_per_broker": 2, "drain_moves_per_minute": 100},
            }
        )
        start = len(owned(group, 0))
        drained_per_window: list[int] = []
        with peer_group_from_config(config) as admin:
            board = BrokerLoadBoard(retain_ms=3_600_000)
            handler = build_handler(
                config, admin, board=board, draining_of=lambda _cluster: frozenset({target})
            )
            try:
                for batch in range(1, 16):
                    if not owned(group, 0):
                        break
                    samples = take_samples(
                        admin, config, samples=1, interval_s=0, sleep=lambda s: None, board=board
                    )
                    now_ms = int(time.time() * 1000)
                    handler.handle(
                        batch_report(
                            batch_id=batch, window_end_ms=now_ms, bundles=window_loads(samples)
                        )
                    )
                    plan = handler.last_move_plans[CLUSTER]
                    assert plan.draining == (target,)
                    assert all(m.destination != target for m in plan.moves)
                    drained_per_window.append(sum(m.reason is MoveReason.DRAIN for m in plan.moves))
                    # The modular load manager places an unloaded bundle at its next lookup.
                    group.clock.advance(30)
            finally:
                handler.close()
            progress = handler.mover.drain_progress if handler.mover else None
        assert owned(group, 0) == [], drained_per_window
    assert start > 2 and max(drained_per_window) == 2
    assert sum(drained_per_window) >= start
    outcomes = [o for o in handler.last_outcomes if o.reason == "drain"]
    assert all(o.result.value in {"applied", "unknown"} for o in outcomes)
    assert progress is not None and progress.take_counts(CLUSTER)[0] == 1
