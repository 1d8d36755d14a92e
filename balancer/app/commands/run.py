"""`pulsar-balancer run`: the balancer itself.

Without `--config` it runs the embedded default (a simulated two-cluster Pulsar peer group,
an embedded Kafka-protocol broker, the collector, the Spark job, the controller in apply
mode and the metrics endpoint, all on 127.0.0.1). With `--config FILE` the same process
runs against real Kafka and real Pulsar clusters.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from rich.console import Console, RenderableType

from balancer.app.config import BalancerConfig, load_config
from balancer.app.preflight import check_environment, setting_error

if TYPE_CHECKING:  # run_command imports the app when a run starts
    from balancer.app.app_handler import LiveState
    from balancer.app.commands import Subparsers
    from balancer.app.wiring import BalancerApp

log = logging.getLogger(__name__)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the balancer (no --config: the embedded demo on 127.0.0.1)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, help="balancer YAML config (default: embedded)")
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    parser.add_argument(
        "--summary-json",
        type=Path,
        metavar="PATH",
        help="also write the end-of-run summary as JSON to PATH",
    )
    parser.add_argument(
        "--mode",
        choices=("apply", "dry-run"),
        help="override the controller mode (embedded default: apply)",
    )
    embedded = parser.add_argument_group("embedded default (no --config)")
    embedded.add_argument(
        "--scenario", type=Path, help="simulator scenario (default: conf/scenarios/default.yaml)"
    )
    embedded.add_argument(
        "--time-scale",
        type=float,
        default=60.0,
        help="simulated seconds per real second (default: 60)",
    )
    embedded.add_argument(
        "--state-dir", type=Path, help="checkpoint, journal and audit log (default: a new temp dir)"
    )
    embedded.add_argument(
        "--metrics-port", type=int, default=0, help="metrics port (default: any free port)"
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="plain log lines instead of the live view (default when not a TTY)",
    )
    parser.set_defaults(handler=run_command)


class _Render(Protocol):
    def __call__(
        self, live: LiveState, *, mode: str, elapsed_s: float, duration_s: float | None
    ) -> RenderableType: ...


class _Stop:
    """Set by Ctrl-C / SIGTERM or the duration; the main loop polls it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = "finished"

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.reason = signal.Signals(signum).name
        self.event.set()


def _logging(state_dir: Path | None, live: bool) -> None:
    handlers: list[logging.Handler] = []
    if state_dir is not None:
        handlers.append(logging.FileHandler(state_dir / "balancer.log"))
    if not live:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO,
        handlers=handlers,
        force=True,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("py4j", "kafka", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_command(args: argparse.Namespace) -> int:
    from balancer.app.embedded import EmbeddedStack
    from balancer.app.liveview import children_stderr_to, render_live
    from balancer.app.run_summary import RunSummary, print_summary
    from balancer.app.summary import start_census, summarize
    from balancer.app.wiring import BalancerApp

    console = Console(stderr=False)
    live_view = not args.no_live and console.is_terminal
    stack: EmbeddedStack | None = None
    if args.config is not None:
        config = load_config(args.config)
        if args.mode:
            config = config.model_copy(
                update={"controller": config.controller.model_copy(update={"mode": args.mode})}
            )
        # What validate-config checks on this machine, before anything starts.
        check_environment(config, source=str(args.config), probe_port=True)
        state_dir = Path(config.controller.journal_path).parent
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise setting_error("controller.journal_path", state_dir, exc) from None
        _logging(state_dir, live_view)
    else:
        console.print(
            "[bold]Starting the embedded demo[/]: a simulated Pulsar peer group, "
            "an embedded Kafka broker and Spark, all on 127.0.0.1 ..."
        )
        stack = EmbeddedStack.start(
            scenario=args.scenario,
            time_scale=args.time_scale,
            state_dir=args.state_dir,
            mode=args.mode or "apply",
            metrics_port=args.metrics_port,
        )
        config = stack.config
        state_dir = stack.state_dir
        _logging(state_dir, live_view)
        console.print(f"state and logs in {state_dir}")

    spark_output = ExitStack()
    if live_view:
        # Spark writes to the terminal behind the live view's back: to a file instead.
        spark_output.enter_context(children_stderr_to(state_dir / "spark.log"))
    stop = _Stop()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    app: BalancerApp | None = None
    summary: RunSummary | None = None
    started = time.monotonic()
    try:
        app = BalancerApp(config)
        # Taken while the stream starts (a split needs several windows, so it comes first);
        # a cluster that does not answer never holds up the start.
        before = start_census(app.admin)
        app.start()
        # PySpark installs its own SIGINT handler (cancel all jobs, raise KeyboardInterrupt)
        # when the SparkContext starts; ours stops the run cleanly instead.
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        assert app.health is not None
        console.print(
            f"metrics: {app.health.url}/metrics   clusters: "
            + ", ".join(f"{c.name}={c.admin_url}" for c in config.clusters)
        )
        _wait(app, stop, args.duration, live_view, console, render_live, config, started)
        error = app.stream_error()
        app.stop()
        summary = summarize(app, before=before(), config=config, started=started, error=error)
    finally:
        if app is not None:
            app.stop()
        if stack is not None:
            stack.stop()
        spark_output.close()
    assert summary is not None  # set on every path that reaches here
    print_summary(summary, console)
    if args.summary_json:
        args.summary_json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
        console.print(f"summary written to {args.summary_json}")
    return 1 if summary.stream_error else 0


def _wait(
    app: BalancerApp,
    stop: _Stop,
    duration_s: float | None,
    live_view: bool,
    console: Console,
    render: _Render,
    config: BalancerConfig,
    started: float,
) -> None:
    deadline = None if duration_s is None else started + duration_s
    mode = config.controller.mode

    def view() -> RenderableType:
        return render(
            app.live, mode=mode, elapsed_s=time.monotonic() - started, duration_s=duration_s
        )

    def should_stop() -> bool:
        if stop.event.is_set():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return True
        return app.stream_error() is not None

    if live_view:
        from balancer.app.liveview import live_display

        with live_display(console, view()) as live:
            while not should_stop():
                stop.event.wait(0.5)
                live.update(view())
        return
    last_batches = -1
    while not should_stop():
        stop.event.wait(1.0)
        with app.live.lock:
            batches, consumed = app.live.batches, app.live.events_consumed
            rejected, over = app.live.events_rejected_total, len(app.live.over_threshold)
        if batches != last_batches:
            last_batches = batches
            print(
                f"[{time.monotonic() - started:5.0f} s] batches={batches} "
                f"events={consumed} rejected={rejected} bundles_over_limit={over}",
                flush=True,
            )
