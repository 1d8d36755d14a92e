"""What `run` needs from this machine: checked by validate-config and by run before anything
starts, each problem one line naming the setting, nothing created, no secret read."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import main
from balancer.app.config import BalancerConfig
from balancer.app.preflight import environment_problems
from tests.configs import machine_ok_config as base
from tests.configs import with_setting

SECRET = "kafka-password-value"


def problems(data: dict[str, Any], **kwargs: Any) -> list[str]:
    return environment_problems(BalancerConfig.from_mapping(data), environ={}, **kwargs)


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain-file"
    path.write_text("x")
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_a_sound_config_has_no_problem_and_nothing_is_created(tmp_path: Path) -> None:
    assert problems(base(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []  # no directory made, no journal opened


def test_sasl_password_file_and_env(tmp_path: Path) -> None:
    password = tmp_path / "kafka.password"
    password.write_text(SECRET)
    security = {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "u"}
    data = with_setting(
        base(tmp_path), "kafka.security", {**security, "password_file": str(password)}
    )
    assert problems(data) == []
    data = with_setting(base(tmp_path), "kafka.security", {**security, "password_env": "KAFKA_PW"})
    assert problems(data) == [
        "kafka.security.password_env: environment variable KAFKA_PW is not set"
    ]
    config = BalancerConfig.from_mapping(data)
    assert environment_problems(config, environ={"KAFKA_PW": SECRET}) == []


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("kafka.security.ssl_ca_file", "{tmp}/missing-ca.pem",
         "kafka.security.ssl_ca_file: {tmp}/missing-ca.pem does not exist"),
        ("kafka.security.ssl_ca_file", "{tmp}",
         "kafka.security.ssl_ca_file: {tmp} is not a regular file"),
        ("clusters.0.token_file", "{tmp}/no-token",
         "clusters.0.token_file: {tmp}/no-token does not exist"),
        ("clusters.0.tls_ca_file", "{tmp}/no-ca.pem",
         "clusters.0.tls_ca_file: {tmp}/no-ca.pem does not exist"),
        ("clusters.0.token_env", "PULSAR_TOKEN",
         "clusters.0.token_env: environment variable PULSAR_TOKEN is not set"),
        ("spark.checkpoint_dir", "{file}/checkpoints",
         "spark.checkpoint_dir: {file}/checkpoints cannot be created: {file} is not a directory"),
        ("spark.checkpoint_dir", "{file}", "spark.checkpoint_dir: {file} is not a directory"),
        ("controller.journal_path", "{file}/j/journal.sqlite3",
         "controller.journal_path: {file}/j/journal.sqlite3: {file}/j cannot be created: "
         "{file} is not a directory"),
        ("controller.journal_path", "{tmp}",
         "controller.journal_path: {tmp} is not a regular file"),
        ("controller.audit_log_path", "{file}/audit.jsonl",
         "controller.audit_log_path: {file}/audit.jsonl: {file} is not a directory"),
        ("metrics.bind_address", "192.0.2.1",
         "metrics.bind_address: cannot listen on 192.0.2.1:0 (Cannot assign requested address)"),
    ],
    ids=["ssl-ca-missing", "ssl-ca-directory", "token-file", "tls-ca", "token-env",
         "checkpoint-under-a-file", "checkpoint-is-a-file", "journal-under-a-file",
         "journal-is-a-directory", "audit-under-a-file", "address-not-this-hosts"],
)  # fmt: skip
def test_each_problem_names_its_setting(
    tmp_path: Path, a_file: Path, setting: str, value: str, expected: str
) -> None:
    def fill(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{file}", str(a_file))

    if setting == "kafka.security.ssl_ca_file":
        security = {"protocol": "SSL", "ssl_ca_file": fill(value)}
        data = with_setting(base(tmp_path), "kafka.security", security)
    else:
        data = with_setting(base(tmp_path), setting, fill(value))
    assert problems(data) == [fill(expected)]


def test_the_port_is_probed_for_run_only(tmp_path: Path, busy_port: int) -> None:
    data = with_setting(base(tmp_path), "metrics.port", busy_port)
    assert problems(data) == []  # validate-config: a running balancer holds its port
    assert problems(data, probe_port=True) == [
        f"metrics.port: cannot listen on 127.0.0.1:{busy_port} (Address already in use)"
    ]


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_validate_config_checks_this_machine_unless_schema_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = with_setting(base(tmp_path), "clusters.0.token_file", str(tmp_path / "no-token"))
    path = write(tmp_path, data)
    assert main(["validate-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cannot run on this machine" in err and "clusters.0.token_file" in err
    assert main(["validate-config", "--schema-only", str(path)]) == 0
    assert list(tmp_path.iterdir()) == [path]  # nothing created either way


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("spark.checkpoint_dir", "{file}/checkpoints"),
        ("controller.journal_path", "{file}/journal.sqlite3"),
        ("metrics.bind_address", "192.0.2.1"),
        ("kafka.security", {"protocol": "SSL", "ssl_ca_file": "{tmp}/missing-ca.pem"}),
        ("metrics.port", "{busy}"),
    ],
    ids=["checkpoint", "journal", "bind-address", "ssl-ca-file", "port-in-use"],
)
def test_run_refuses_to_start_with_one_line_naming_the_setting(
    tmp_path: Path,
    a_file: Path,
    busy_port: int,
    capsys: pytest.CaptureFixture[str],
    setting: str,
    value: Any,
) -> None:
    def fill(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        text = str(v).replace("{tmp}", str(tmp_path)).replace("{file}", str(a_file))
        return busy_port if text == "{busy}" else text

    path = write(tmp_path, with_setting(base(tmp_path), setting, fill(value)))
    assert main(["run", "--config", str(path), "--no-live", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    named = "kafka.security.ssl_ca_file" if setting == "kafka.security" else setting
    assert f" {named}: " in err


def test_collect_refuses_a_missing_kafka_ca_file_at_once(
    tmp_path: Path, a_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Once a 31 s KafkaTimeoutError traceback; the collector needs no state directory.
    data = with_setting(
        base(tmp_path), "kafka.security", {"protocol": "SSL", "ssl_ca_file": "/no/ca.pem"}
    )
    data = with_setting(data, "spark.checkpoint_dir", str(a_file / "not-needed-by-collect"))
    path = write(tmp_path, data)
    assert main(["collect", "--config", str(path), "--polls", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {path}: cannot run on this machine "
        "kafka.security.ssl_ca_file: /no/ca.pem does not exist\n"
    )
