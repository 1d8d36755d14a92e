"""The live view shows the brokers marked draining (issue 43, point 2)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from balancer.app.app_handler import LiveState
from balancer.app.liveview import render_live
from balancer.core.drain_marks import changed, new_mark


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
