"""The operations HTTP endpoint: /metrics, /healthz and /readyz on one small threaded server.

/healthz answers 200 while the process serves requests and every liveness check passes,
else 503 naming the failing ones (a process that cannot recover by itself, e.g. a stream
that ended, so the orchestrator restarts it). /readyz answers 200 only when every readiness
check passes, else 503 with a JSON body naming the failing checks; a check that raises
counts as failing (only the exception's class is reported: messages may carry URLs or
credentials). Informational providers (`info`) add keys to the /readyz body without
deciding readiness, e.g. `writer_lease`: a standby balancer is ready, and says who acts.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

Check = Callable[[], bool]
Info = Callable[[], object]  # JSON-serialisable; shown in the /readyz body, never decides it


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    checks: Mapping[str, bool]
    errors: Mapping[str, str]  # check name -> exception class, for checks that raised

    @property
    def failing(self) -> list[str]:
        return [name for name, ok in self.checks.items() if not ok]

    def as_json(self, *, state: str = "ready", info: Mapping[str, object] | None = None) -> bytes:
        body: dict[str, object] = {
            "status": state if self.ready else f"not {state}",
            "failing": self.failing,
            "checks": dict(self.checks),
        }
        if self.errors:
            body["errors"] = dict(self.errors)
        body.update(info or {})
        return json.dumps(body, sort_keys=True).encode()


def gather(info: Mapping[str, Info]) -> dict[str, object]:
    """Each provider's value; one that raises shows its exception's class only."""
    values: dict[str, object] = {}
    for name, provider in info.items():
        try:
            values[name] = provider()
        except Exception as exc:
            values[name] = {"error": type(exc).__name__}
    return values


def evaluate(checks: Mapping[str, Check]) -> Readiness:
    """Run every check (none short-circuits, so the body names all failing ones)."""
    results: dict[str, bool] = {}
    errors: dict[str, str] = {}
    for name, check in checks.items():
        try:
            results[name] = bool(check())
        except Exception as exc:  # a broken probe means not ready, never a crashed server
            results[name] = False
            errors[name] = type(exc).__name__
    return Readiness(ready=all(results.values()), checks=results, errors=errors)


def standard_checks(
    *,
    stream_running: Check,
    kafka_reachable: Check,
    clusters_reachable: Callable[[], Iterable[bool]],
    last_batch_age_s: Callable[[], float | None],
    max_batch_age_s: float,
    late_event_share: Callable[[], float | None] | None = None,
    max_late_event_share: float = 0.5,
) -> dict[str, Check]:
    """The balancer's readiness checks: stream up, a recent batch, Kafka and >= 1 cluster.

    `last_batch_age_s` returns None before the first batch (not ready yet). With
    `late_event_share` (late / valid events recently, None without events), a share above
    `max_late_event_share` fails `events_on_time`: the windows miss most events (a watermark
    ahead of the stream), so the balancer is blind although batches run.
    """
    if max_batch_age_s <= 0:
        raise ValueError(f"max_batch_age_s must be > 0, got {max_batch_age_s}")

    def batch_recent() -> bool:
        age_s = last_batch_age_s()
        return age_s is not None and age_s <= max_batch_age_s

    checks: dict[str, Check] = {
        "stream_running": stream_running,
        "last_batch_recent": batch_recent,
        "kafka_reachable": kafka_reachable,
        "cluster_reachable": lambda: any(clusters_reachable()),
    }
    if late_event_share is not None:
        share = late_event_share

        def events_on_time() -> bool:
            value = share()
            return value is None or value <= max_late_event_share

        checks["events_on_time"] = events_on_time
    return checks


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    _JSON: ClassVar[str] = "application/json"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, content_type, encoder(self.server.registry))
        elif path == "/healthz":
            if not self.server.live_checks:
                self._send(200, self._JSON, b'{"status": "alive"}')
                return
            liveness = evaluate(self.server.live_checks)
            body = liveness.as_json(state="alive")
            self._send(200 if liveness.ready else 503, self._JSON, body)
        elif path == "/readyz":
            readiness = evaluate(self.server.checks)
            body = readiness.as_json(info=gather(self.server.info))
            self._send(200 if readiness.ready else 503, self._JSON, body)
        else:
            self._send(404, self._JSON, b'{"error": "not found"}')

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Probes hit these paths every few seconds: keep them out of the info log.
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        checks: Mapping[str, Check],
        live_checks: Mapping[str, Check],
        info: Mapping[str, Info],
    ) -> None:
        self.registry = registry
        self.checks = checks
        self.live_checks = live_checks
        self.info = info
        super().__init__(address, _Handler)


class HealthServer:
    """Serves /metrics, /healthz and /readyz on `host:port` (port 0: the OS picks one).

    `checks` decide /readyz, `live_checks` (default none: always alive) decide /healthz;
    `info` only adds to the /readyz body.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        checks: Mapping[str, Check],
        live_checks: Mapping[str, Check] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        info: Mapping[str, Info] | None = None,
    ) -> None:
        self._server = _Server(
            (host, port), registry, dict(checks), dict(live_checks or {}), dict(info or {})
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}"

    def start(self) -> HealthServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.1,), name="health-http", daemon=True
            )
            self._thread.start()
            log.info("metrics and health endpoint on %s", self.url)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
