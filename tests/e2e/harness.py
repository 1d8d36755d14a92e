"""End-to-end harness: the real `pulsar-balancer run` process against an in-test simulator.

The simulated peer group runs in the test process (so tests can read its state), the Kafka
broker is the session fixture's, and the balancer is a child process started exactly as an
operator would start it: `pulsar-balancer run --config FILE`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from balancer.sim import RunningPeerGroup

SCENARIO = Path(__file__).with_name("scenario.yaml")
TOKEN_ENV = "E2E_PULSAR_TOKEN"
# A token that must never show up in any output, log, audit record or summary.
SECRET_TOKEN = "e2e-secret-" + uuid.uuid4().hex


# What write_config adds by default: scenario.yaml's runs unload a split's children and
# offload topics over 10 GiB.
E2E_CONTROLLER: Mapping[str, Any] = {"unload_after_split": True}
E2E_OFFLOAD: Mapping[str, Any] = {"default_threshold": "10G"}


def write_config(
    tmp: Path,
    *,
    sim: RunningPeerGroup,
    bootstrap_servers: str,
    mode: str,
    stats_topic: str | None = None,
    clusters: Sequence[str] = ("east", "west"),
    controller: Mapping[str, Any] = E2E_CONTROLLER,
    offload: Mapping[str, Any] | None = E2E_OFFLOAD,
) -> Path:
    """A run's config file; `stats_topic` defaults to a fresh topic of its own. The
    `controller` keys are added to mode, journal and audit log; `offload` None: no section.
    The first of `clusters` is the entry cluster (east for scenario.yaml: e2e/hot, on west,
    is still routed by its stats)."""
    stats_topic = stats_topic or f"stats-{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {
        "kafka": {
            "bootstrap_servers": [bootstrap_servers],
            "stats_topic": stats_topic,
            "dead_letter_topic": f"{stats_topic}-dlq",
        },
        "spark": {
            "master": "local[2]",
            "checkpoint_dir": str(tmp / "checkpoints"),
            "window_s": 10,
            "slide_s": 5,
            "watermark_s": 5,
            "trigger_interval_s": 3,
        },
        "clusters": [_cluster(sim, name) for name in clusters],
        "collector": {"interval_s": 2},
        "detection": {"cooldown_s": 5, "hit_count_threshold": 3},
        "controller": {
            "mode": mode,
            "journal_path": str(tmp / "journal.sqlite3"),
            "audit_log_path": str(tmp / "audit.jsonl"),
            **controller,
        },
        **({"offload": dict(offload)} if offload is not None else {}),
        "metrics": {"port": 0},
    }
    path = tmp / "balancer.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _cluster(sim: RunningPeerGroup, name: str) -> dict[str, Any]:
    """A cluster of the config: through its https admin URL (trusting the simulator's
    certificate) when its brokers have a TLS port beside the plain one (issue 41)."""
    tls_url = sim.tls_admin_urls.get(name)
    if tls_url is None:
        return {"name": name, "admin_url": sim.admin_urls[name], "token_env": TOKEN_ENV}
    return {
        "name": name,
        "admin_url": tls_url,
        "token_env": TOKEN_ENV,
        "tls_ca_file": str(sim.tls_ca_file),
    }


@dataclass
class BalancerProcess:
    config: Path
    tmp: Path
    summary: Path
    process: subprocess.Popen[bytes] | None = None
    output: Path = field(init=False)

    def __post_init__(self) -> None:
        self.output = self.tmp / f"run-{uuid.uuid4().hex[:6]}.out"

    def start(self) -> BalancerProcess:
        exe = Path(sys.executable).with_name("pulsar-balancer")
        env = {**os.environ, TOKEN_ENV: SECRET_TOKEN, "PYSPARK_PYTHON": sys.executable}
        with self.output.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    str(exe),
                    "run",
                    "--config",
                    str(self.config),
                    "--no-live",
                    "--summary-json",
                    str(self.summary),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # SIGKILL reaches only this process group
            )
        return self

    def stop(self, timeout_s: float = 120) -> int:
        """Ctrl-C as an operator would; returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the balancer and everything it started (the Spark JVM, Python workers)."""
        assert self.process is not None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def read_summary(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.summary.read_text())
        return data

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def batches(self) -> int:
        """Micro-batches handled so far, from the progress lines `run --no-live` prints."""
        found = re.findall(r"\] batches=(\d+) ", self.text())
        return int(found[-1]) if found else 0


def wait_for(
    condition: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    process: BalancerProcess | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and not process.alive():
            tail = process.text()[-4000:]
            raise AssertionError(f"balancer exited while waiting for {what}:\n{tail}")
        time.sleep(0.5)
    tail = process.text()[-4000:] if process is not None else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{tail}")


def audit_records(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def committed_offsets(checkpoint: Path) -> dict[str, int]:
    """End offsets (partition -> offset) of the last micro-batch Spark committed."""
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(commits[-1])).read_text().splitlines()
    offsets: dict[str, int] = json.loads(lines[-1])
    return offsets


def events_between(records: list[Any], start: dict[str, int], end: dict[str, int]) -> int:
    """Events (valid or not) in the Kafka `records` from offsets `start` up to `end`.

    An envelope counts each of its events, as the stream does (`events_consumed`); a message
    that is not even JSON counts one; a round marker counts none (it is no event).
    """
    from balancer.core.events import parse_message
    from balancer.core.round_marker import is_round_marker

    return sum(
        len(parse_message(r.value))
        for r in records
        if start.get(str(r.partition), 0) <= r.offset < end.get(str(r.partition), 0)
        and not is_round_marker(r.value)
    )
