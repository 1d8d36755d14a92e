"""What `run` needs from this machine, checked before anything starts, without side effects.

The config file alone can be valid and still fail here: a token or CA file missing, a state
directory that cannot be written, an environment variable not set, a listen address that
is not this host's, Spark's Kafka connector missing for `kafka.source: native`.
`validate-config` reports these too (unless `--schema-only`), and `run` refuses to start on
them, each as one line naming the setting. Nothing is created or written, and no secret is
read: files are checked with stat and access(2).
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from balancer.app.config import BalancerConfig, ConfigError
from streaming.spark.kafka_connector import connector_problem

_SEARCH = os.W_OK | os.X_OK  # create entries in a directory


def environment_problems(
    config: BalancerConfig,
    environ: Mapping[str, str] | None = None,
    *,
    probe_port: bool = False,
) -> list[str]:
    """One `setting: problem` line for each thing `run` would fail on here; [] when none.

    `probe_port` also checks that `metrics.port` is free (for `run`, about to listen on it;
    `validate-config` leaves it alone, as a running balancer holds it).
    """
    problems = client_problems(config, environ)
    _writable_dir(problems, "spark.checkpoint_dir", config.spark.checkpoint_dir)
    _writable_file(problems, "controller.journal_path", config.controller.journal_path)
    _writable_file(problems, "controller.audit_log_path", config.controller.audit_log_path)
    metrics = config.metrics
    _listen(problems, metrics.bind_address, metrics.port if probe_port else 0)
    if config.kafka.source == "native":
        connector = connector_problem(environ)
        if connector is not None:
            problems.append(
                "kafka.source: native needs Spark's Kafka connector, not installed here: "
                f"{connector} (add those jars there, or set kafka.source: python)"
            )
    return problems


def client_problems(config: BalancerConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """What the Kafka and Pulsar clients need (the `collect` command needs no more)."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    security = config.kafka.security
    _readable_file(problems, "kafka.security.password_file", security.password_file)
    _readable_file(problems, "kafka.security.ssl_ca_file", security.ssl_ca_file)
    if security.protocol.startswith("SASL"):
        _env_set(problems, "kafka.security.password_env", security.password_env, env)
    for i, cluster in enumerate(config.clusters):
        _readable_file(problems, f"clusters.{i}.token_file", cluster.token_file)
        _readable_file(problems, f"clusters.{i}.tls_ca_file", cluster.tls_ca_file)
        _env_set(problems, f"clusters.{i}.token_env", cluster.token_env, env)
    return problems


def check_environment(
    config: BalancerConfig, *, source: str, probe_port: bool = False, clients_only: bool = False
) -> None:
    """Raise ConfigError listing every problem found (`clients_only`: `client_problems`)."""
    if clients_only:
        problems = client_problems(config)
    else:
        problems = environment_problems(config, probe_port=probe_port)
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise ConfigError(f"{source}: cannot run on this machine\n{lines}")


def setting_error(setting: str, value: object, exc: OSError) -> ConfigError:
    """A run-time OSError as one line naming the setting it came from."""
    return ConfigError(f"{setting} ({value}): {exc.strerror or exc}")


def _readable_file(problems: list[str], setting: str, path: Path | None) -> None:
    if path is None:
        return
    if not path.exists():
        problems.append(f"{setting}: {path} does not exist")
    elif not path.is_file():
        problems.append(f"{setting}: {path} is not a regular file")
    elif not os.access(path, os.R_OK):
        problems.append(f"{setting}: {path} is not readable")


def _env_set(problems: list[str], setting: str, name: str | None, env: Mapping[str, str]) -> None:
    # The name is not a secret; the value is never looked at beyond being present.
    if name is not None and name not in env:
        problems.append(f"{setting}: environment variable {name} is not set")


def _writable_dir(problems: list[str], setting: str, path: Path) -> None:
    problem = _directory_problem(path)
    if problem is not None:
        problems.append(f"{setting}: {problem}")


def _writable_file(problems: list[str], setting: str, path: Path) -> None:
    if path.exists() and not path.is_file():
        problems.append(f"{setting}: {path} is not a regular file")
    elif path.exists() and not os.access(path, os.W_OK):
        problems.append(f"{setting}: {path} is not writable")
    else:
        # SQLite adds its -wal and -shm files next to the journal: the directory counts too.
        problem = _directory_problem(path.parent)
        if problem is not None:
            problems.append(f"{setting}: {path}: {problem}")


def _directory_problem(path: Path) -> str | None:
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        if not os.access(path, _SEARCH):
            return f"directory {path} is not writable"
        return None
    # `run` creates the missing directories: the nearest existing one must allow it.
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{path} cannot be created: {ancestor} is not a directory"
    if not os.access(ancestor, _SEARCH):
        return f"{path} cannot be created: {ancestor} is not writable"
    return None


def _listen(problems: list[str], address: str, port: int) -> None:
    """Bind as the metrics server would (IPv4, SO_REUSEADDR), then close at once.

    Port 0 (an ephemeral port) checks only that the address is one of this host's.
    """
    try:
        infos = socket.getaddrinfo(address, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        problems.append(f"metrics.bind_address: {address} does not resolve ({exc.strerror})")
        return
    family, kind, proto, _, sockaddr = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except OSError as exc:
        setting = "metrics.port" if exc.errno == errno.EADDRINUSE else "metrics.bind_address"
        problems.append(f"{setting}: cannot listen on {address}:{port} ({exc.strerror})")
