"""The live view shows the brokers marked draining (issue 43, point 2)."""

from __future__ import annotations

import io

from rich.console import Console

from balancer.app.liveview import render_live
from balancer.app.wiring import LiveState


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
