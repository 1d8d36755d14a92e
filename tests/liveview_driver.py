"""`run`'s live display for a few frames, on whatever terminal this process is given.

    python -m tests.liveview_driver FRAMES BUNDLES_OVER SPARK_LOG

The pseudo-terminal test runs it: the same display (`live_display`) and the same redirect
of children's stderr (`children_stderr_to`) as `pulsar-balancer run`, with the state of a
busy run, and between frames a child process writing long lines to its inherited stderr,
as Spark's JVM and Python workers do.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rich.console import Console

from balancer.app.app_handler import LiveState
from balancer.app.liveview import LiveView, children_stderr_to, live_display, render_live
from balancer.controller.outcome import Outcome
from balancer.core.bundles import BundleRange
from balancer.core.decisions import DecisionKind
from balancer.core.load import BundleLoad
from balancer.core.results import ActionResult

BEFORE = ("before the live view: 1", "before the live view: 2")
AFTER = "after the live view"
CHILD_AFTER = "a child writes to stderr after the live view"  # the terminal is fd 2 again
PYTHON_STDERR = "a line on Python's stderr"
NOISE = "worker noise " * 15  # ~200 characters: wraps on any terminal narrower
NOISE_CHILD = f"import os\nfor _ in range(6): os.write(2, b'{NOISE}\\n')"


def busy_state(bundles_over: int) -> LiveState:
    live = LiveState()
    live.events_consumed, live.bundles_reporting = 123_456, 40
    for i in range(bundles_over):
        load = BundleLoad(
            "east" if i % 2 else "west",
            f"acme/orders-{i}",
            BundleRange(i * 0x01000000, (i + 1) * 0x01000000),
            0,
            msg_rate_in=30_000 + 1000 * i,
            msg_rate_out=9_000,
            topic_count=1 if i % 3 == 0 else 40,
        )
        live.over_threshold.append((load, 1.5 - i / 100))
    for i in range(8):
        live.outcomes.append(
            Outcome(f"split-{i}", DecisionKind.SPLIT, "east", f"acme/orders-{i}",
                    ActionResult.APPLIED, "MsgRate", f"split into {2 + i % 3} bundles", 0.1)
        )  # fmt: skip
    return live


def main(argv: list[str]) -> int:
    frames, bundles_over, spark_log = int(argv[0]), int(argv[1]), Path(argv[2])
    live = busy_state(bundles_over)
    console = Console()
    for line in BEFORE:
        console.print(line)

    def view(frame: int) -> LiveView:
        return render_live(live, mode="apply", elapsed_s=frame, duration_s=None)

    with children_stderr_to(spark_log), live_display(console, view(0)) as display:
        for frame in range(1, frames + 1):
            live.batches = frame
            subprocess.run([sys.executable, "-c", NOISE_CHILD], check=True)
            if frame == 1:
                print(PYTHON_STDERR, file=sys.stderr)
            display.update(view(frame), refresh=True)
    console.print(AFTER)
    subprocess.run(
        [sys.executable, "-c", f"import os; os.write(2, b'{CHILD_AFTER}\\n')"], check=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
