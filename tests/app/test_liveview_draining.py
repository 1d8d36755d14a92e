"""The live view shows the brokers marked draining (issue 43, point 2)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from balancer.app.app_handler import LiveState
from balancer.app.liveview import render_live
from balancer.core.drain_marks import RESTART_RULE_BY, DrainMark, changed, new_mark
from balancer.core.rollout_record import (
    Rollout,
    RollProgress,
    finished,
    new_rollout,
    roll_progress,
)


def text_of(renderable: object, *, height: int | None = None) -> str:
    console = Console(width=120, height=height or 25, record=True, file=io.StringIO(),
                      force_terminal=height is not None)  # fmt: skip
    console.print(renderable)
    return console.export_text()


def test_draining_brokers_are_named_per_cluster() -> None:
    live = LiveState()
    live.draining = {"east": ("b3:8080", "b4:8080"), "west": ()}
    text = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=None))
    assert "draining east: b3:8080, b4:8080" in text
    assert "draining west" not in text  # a cluster with no mark says nothing


def test_no_mark_no_line() -> None:
    text = text_of(render_live(LiveState(), mode="apply", elapsed_s=30, duration_s=None))
    assert "draining" not in text


def test_a_small_terminal_keeps_the_draining_line() -> None:
    live = LiveState()
    live.draining = {"east": ("b3:8080",)}
    text = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=None), height=8)
    assert "draining east: b3:8080" in text


def test_the_apps_watcher_callback_fills_the_live_state(tmp_path: Path) -> None:
    from balancer.app.config import BalancerConfig
    from balancer.app.wiring import BalancerApp

    config = BalancerConfig.embedded_default(
        bootstrap_servers=["127.0.0.1:9"],
        clusters=[("east", "http://127.0.0.1:9")],
        state_dir=tmp_path,
    )
    app = BalancerApp(config)
    try:
        assert app.draining_of("east") == frozenset()  # not started: no marks, no Kafka call
        draining = new_mark("east", "b3:8080", by="ops", at_ms=1)
        cleared = changed(new_mark("east", "b4:8080", by="ops", at_ms=1), "cleared",
                          by="ops", at_ms=2)  # fmt: skip
        app._on_drain_marks((draining, cleared))
        assert app.live.draining == {"east": ("b3:8080",)}
        app._on_drain_marks((cleared,))
        assert app.live.draining == {}
    finally:
        app.stop()


def _roll(order: tuple[str, ...], *, at_ms: int = 10) -> Rollout:
    return new_rollout("east", order, {}, by="ops", at_ms=at_ms)


def _back(broker: str, at_ms: int) -> DrainMark:
    """A broker's mark cleared by the restart rule: it restarted."""
    mark = new_mark("east", broker, by="ops", at_ms=at_ms - 1)
    return changed(mark, "cleared", by=RESTART_RULE_BY, at_ms=at_ms)


def test_roll_progress_counts_brokers_back_since_the_roll_started() -> None:
    roll = _roll(("b3:8080", "b2:8080", "b1:8080"))
    marks = (_back("b3:8080", 20), _back("b2:8080", 5))  # b2 came back before the roll
    progress = roll_progress(roll, marks)
    assert progress.restarted == ("b3:8080",) and progress.next == "b2:8080"
    assert progress.total == 3
    done = roll_progress(roll, [_back(b, 20) for b in roll.order])
    assert done.next is None and len(done.restarted) == 3


def test_a_roll_in_progress_is_shown_with_the_next_broker() -> None:
    live = LiveState()
    live.rolling = {"east": RollProgress(("b3:8080", "b2:8080", "b1:8080"), ("b3:8080",))}
    text = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=None))
    assert "rolling east: next b2:8080, 1 of 3 restarted" in text
    small = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=None), height=8)
    assert "rolling east: next b2:8080, 1 of 3 restarted" in small
    assert "rolling" not in text_of(
        render_live(LiveState(), mode="apply", elapsed_s=30, duration_s=None)
    )


def test_the_apps_watcher_callback_shows_the_roll_and_sets_its_gauge(tmp_path: Path) -> None:
    from balancer.app.config import BalancerConfig
    from balancer.app.drain_wiring import DrainMarksView
    from balancer.app.wiring import BalancerApp
    from balancer.kafka.drain_marks import KafkaDrainMarks

    config = BalancerConfig.embedded_default(
        bootstrap_servers=["127.0.0.1:9"],
        clusters=[("east", "http://127.0.0.1:9")],
        state_dir=tmp_path,
    )
    app = BalancerApp(config)
    gauge = ("pulsar_balancer_roll_in_progress", {"cluster": "east"})
    try:
        store = KafkaDrainMarks(bootstrap_servers="127.0.0.1:9")  # no Kafka call: never read
        app.drain_marks = DrainMarksView(store, listed_brokers=lambda _c: (),
                                         may_write=lambda: False)  # fmt: skip
        app._on_drain_marks(())
        assert app.live.rolling == {}
        assert app.registry.get_sample_value(*gauge) == 0
        roll = _roll(("b3:8080", "b2:8080"))
        store._rollouts["east"] = roll  # as a read of the topic leaves it
        back = _back("b3:8080", 20)
        app._on_drain_marks((back,))
        assert app.live.rolling == {"east": RollProgress(roll.order, ("b3:8080",))}
        assert app.registry.get_sample_value(*gauge) == 1
        store._rollouts["east"] = finished(roll, by="ops", at_ms=30)
        app._on_drain_marks((back,))
        assert app.live.rolling == {}
        assert app.registry.get_sample_value(*gauge) == 0
    finally:
        app.drain_marks = None
        app.stop()
