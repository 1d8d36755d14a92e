"""Test helper: a real Prometheus server (Debian's `prometheus`) on 127.0.0.1, and PromQL checks.

`PrometheusServer` starts prometheus on a free loopback port with a temporary storage dir
and a generated scrape config, waits until it is ready, and stops it by its PID.
`check_queries` runs PromQL expressions through `/api/v1/query` and reports every one that
errors or returns no series; `dashboard_queries` lists every panel's expressions of a
Grafana dashboard JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = REPO / "conf" / "grafana"
ALERTS_FILE = REPO / "conf" / "prometheus" / "alerts.yaml"


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrometheusServer:
    """A Prometheus scraping `targets` (host:port) every `scrape_interval_s` as job `job`."""

    def __init__(
        self,
        targets: Sequence[str],
        *,
        job: str = "pulsar-balancer",
        scrape_interval_s: float = 1.0,
        rule_files: Sequence[Path] = (),
        binary: str | None = None,
    ) -> None:
        found = binary or prometheus_binary()
        if found is None:
            raise FileNotFoundError("prometheus is not installed (run .ci/install-tools)")
        self.binary = found
        self.targets = list(targets)
        self.job = job
        self.scrape_interval_s = scrape_interval_s
        self.rule_files = list(rule_files)
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        self._dir = tempfile.TemporaryDirectory(prefix="prom-test-")
        work = Path(self._dir.name)
        interval = f"{max(1, round(self.scrape_interval_s * 1000))}ms"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": self.job, "static_configs": [{"targets": self.targets}]}
            ],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        log = (work / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited early:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)  # polling a real process's readiness: there is no fake clock here
        self.stop()
        raise TimeoutError("prometheus did not become ready")

    def log_tail(self, lines: int = 30) -> str:
        if self._dir is None:
            return ""
        path = Path(self._dir.name) / "prometheus.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def query(self, expr: str) -> dict[str, Any]:
        """The `data` of an instant query; raises QueryError on a PromQL or HTTP error."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise QueryError(expr, f"{body.get('errorType')}: {body.get('error')}")
        data: dict[str, Any] = body["data"]
        return data

    def wait_for_scrapes(
        self, *, up_series: int = 1, samples: int = 3, timeout_s: float = 30.0
    ) -> None:
        """Wait until every target has been scraped `samples` times with up == 1."""
        expr = f'count_over_time(up{{job="{self.job}"}}[5m]) >= {samples} and up == 1'
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.query(expr)["result"]) >= up_series:
                return
            time.sleep(0.25)  # real scrapes on a real clock
        raise TimeoutError(f"targets not scraped {samples} times:\n{self.log_tail()}")


class QueryError(Exception):
    def __init__(self, expr: str, message: str) -> None:
        super().__init__(f"{expr!r}: {message}")
        self.expr = expr


@dataclass(frozen=True, slots=True)
class QueryProblem:
    source: str  # dashboard and panel title, or alert name
    expr: str
    problem: str  # the error, or "no series"


def _non_empty(data: Mapping[str, Any]) -> bool:
    if data.get("resultType") in ("scalar", "string"):
        return True
    return bool(data.get("result"))


def check_queries(
    prometheus: PrometheusServer, queries: Sequence[tuple[str, str]]
) -> list[QueryProblem]:
    """Run each (source, expr); every error or empty result is a problem."""
    problems: list[QueryProblem] = []
    for source, expr in queries:
        try:
            data = prometheus.query(expr)
        except QueryError as exc:
            problems.append(QueryProblem(source, expr, str(exc)))
            continue
        if not _non_empty(data):
            problems.append(QueryProblem(source, expr, "no series"))
    return problems


# Grafana's built-in variables, replaced by values Prometheus accepts.
GRAFANA_BUILTINS = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__interval": "15s",
    "${__interval}": "15s",
    "$__range": "5m",
    "${__range}": "5m",
}


def _panels(panels: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # rows nest panels


def dashboard_queries(
    dashboard: Mapping[str, Any], variables: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(source, expr) of every panel target, variables substituted with `variables`.

    `variables` maps a template variable name to a regex-safe value (e.g. "east" or ".+").
    """
    title = str(dashboard.get("title", "?"))
    queries: list[tuple[str, str]] = []
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = str(target.get("expr", ""))
            for name, value in GRAFANA_BUILTINS.items():
                expr = expr.replace(name, value)
            # Longest names first so $bundle is not eaten by a $bundles variable.
            expr = _substitute(expr, variables)
            source = f"{title} / {panel.get('title', '?')} [{target.get('refId', '?')}]"
            queries.append((source, expr))
    return queries


_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$"
)


def _substitute(expr: str, variables: Mapping[str, str]) -> str:
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
    return expr


def resolve_variables(prometheus: PrometheusServer, dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Pick a value for each `label_values(...)` template variable, as Grafana would (the first).

    Variables resolve in order, so a later selector may use an earlier variable. A variable
    with no value found resolves to a value that matches nothing, which the query check flags.
    """
    resolved: dict[str, str] = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        match = _LABEL_VALUES.match(text)
        if match is None:
            raise ValueError(f"variable {variable.get('name')}: unsupported query {text!r}")
        params: dict[str, str] = {}
        if match.group("selector"):
            params["match[]"] = _substitute(match.group("selector"), resolved)
        response = httpx.get(
            f"{prometheus.url}/api/v1/label/{match.group('label')}/values",
            params=params,
            timeout=10,
        )
        values = response.json().get("data") or []
        resolved[str(variable["name"])] = re.escape(str(values[0])) if values else "__none__"
    return resolved


def load_dashboard(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def check_dashboards(
    prometheus: PrometheusServer, paths: Sequence[Path] | None = None
) -> list[QueryProblem]:
    """Every panel PromQL of every dashboard through `prometheus`: the problems found.

    Template variables take the first value Prometheus has for them (like Grafana's default).
    """
    problems: list[QueryProblem] = []
    for path in paths or sorted(DASHBOARD_DIR.glob("*.json")):
        dashboard = load_dashboard(path)
        variables = resolve_variables(prometheus, dashboard)
        problems += check_queries(prometheus, dashboard_queries(dashboard, variables))
    return problems
