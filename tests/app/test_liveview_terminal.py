"""The live view redraws in place at any terminal size.

Under a real pseudo-terminal of a set size, `run`'s live display draws several frames while
a child process writes long lines to its inherited stderr (as Spark's JVM and Python
workers do); a terminal emulator (pyte) replays everything written, and the screen and its
scrollback must hold exactly one frame, the last. The fitting itself is checked on Rich
consoles of many sizes: a frame never has more lines than the terminal has rows.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyte
import pytest
from rich.console import Console

from balancer.app.liveview import render_live
from tests.liveview_driver import AFTER, BEFORE, CHILD_AFTER, NOISE, PYTHON_STDERR, busy_state

ROOT = Path(__file__).resolve().parents[2]
FRAMES = 5
BOX = re.compile("[│┃╭╰┏┗└┌┡━─]")


def run_on_terminal(columns: int, rows: int, *args: str) -> list[str]:
    """Everything the driver wrote, as the lines a terminal of that size shows and scrolled
    off (oldest first, trailing blanks dropped)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
        "PYTHONIOENCODING": "utf-8",
        "TERM": "xterm-256color",  # no LINES/COLUMNS: the size comes from the terminal
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.liveview_driver", *args],
        stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    screen = pyte.HistoryScreen(columns, rows, history=10_000)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child and its children closed the terminal
                break
            if not data:
                break
            stream.feed(data)
        else:
            pytest.fail("the live view driver did not finish in 120 s")
    finally:
        if child.poll() is None:
            child.kill()
        os.close(master)
    assert child.wait(timeout=10) == 0
    scrolled = [
        "".join(line[x].data for x in range(columns)).rstrip() for line in screen.history.top
    ]
    shown = [line.rstrip() for line in screen.display]
    while shown and not shown[-1]:
        shown.pop()
    return scrolled + shown


@pytest.mark.parametrize(("columns", "rows"), [(80, 24), (160, 50)])
def test_frames_redraw_in_place_on_a_real_terminal(tmp_path: Path, columns: int, rows: int) -> None:
    spark_log = tmp_path / "spark.log"
    lines = run_on_terminal(columns, rows, str(FRAMES), "8", str(spark_log))
    text = "\n".join(lines)
    # One frame in the screen and its scrollback, the last one: nothing stacked up.
    frames = [line for line in lines if "micro-batches" in line]
    assert len(frames) == 1, text
    assert re.search(rf"micro-batches\s+{FRAMES}\b", frames[0]), text
    frame_lines = [line for line in lines if BOX.search(line)]
    assert len(frame_lines) <= rows, text
    # What was on the terminal before and Python's own stderr are still there, once each.
    for line in (*BEFORE, PYTHON_STDERR, AFTER, CHILD_AFTER):
        assert lines.count(line) == 1, (line, text)
    # The children's stderr went to the file, not under the live view.
    assert "worker noise" not in text
    assert spark_log.read_text().count(NOISE) == 6 * FRAMES
    if rows >= 50:  # the whole view fits: every bundle over its limit, every decision
        assert "... " not in text and "one broker serves" in text
        assert text.count("split into") == 8 and "acme/orders-7 " in text
    else:  # most loaded bundles and latest decisions kept, the rest counted
        assert re.search(r"\.\.\. \d+ more bundles over their limit", text), text


def frame_lines(columns: int, rows: int, bundles_over: int) -> list[str]:
    console = Console(
        width=columns, height=rows, force_terminal=True, color_system=None, file=io.StringIO()
    )
    view = render_live(busy_state(bundles_over), mode="apply", elapsed_s=5, duration_s=60)
    rendered = console.render_lines(view, console.options, pad=False)
    return ["".join(segment.text for segment in line) for line in rendered]


@pytest.mark.parametrize("bundles_over", [0, 1, 8, 40])
@pytest.mark.parametrize(
    ("columns", "rows"),
    [(80, 24), (160, 50), (100, 30), (120, 16), (60, 12), (59, 40), (40, 10), (200, 3), (30, 1)],
)
def test_a_frame_never_has_more_lines_than_the_terminal(
    columns: int, rows: int, bundles_over: int
) -> None:
    lines = frame_lines(columns, rows, bundles_over)
    assert 1 <= len(lines) <= rows
    assert all(len(line) <= columns for line in lines)  # no line wraps into another row
    # Whatever the size, the first line says what this is, and the stream's figures follow.
    text = "\n".join(lines)
    assert "pulsar-balancer" in lines[0] or "Pulsar spreads" in lines[0], text
    if rows >= 3:
        assert "micro-batches" in text


def test_a_short_terminal_keeps_the_most_loaded_bundles_and_latest_decisions() -> None:
    text = "\n".join(frame_lines(80, 24, 8))
    assert "Pulsar spreads" not in text  # the introduction goes first
    assert "acme/orders-0 " in text  # the most loaded bundle
    more = re.search(r"\.\.\. (\d+) more bundles over their limit", text)
    assert more is not None, text
    shown = sum(f"acme/orders-{i} " in line for i in range(8) for line in text.splitlines()
                if "%" in line)  # fmt: skip
    assert shown + int(more.group(1)) == 8
    assert "split into" in text  # at least the latest decision


def test_a_narrow_or_tiny_terminal_gets_the_compact_view() -> None:
    lines = frame_lines(40, 10, 8)
    assert lines[0].startswith("pulsar-balancer  running")
    assert lines[2].startswith("bundles over their limit: 8")
    assert not any(BOX.search(line) for line in lines)
    assert frame_lines(200, 1, 8) == [frame_lines(200, 10, 8)[0]]
