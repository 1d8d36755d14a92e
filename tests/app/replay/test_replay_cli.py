"""`pulsar-balancer replay`'s bad input: exit 2 with one line naming the problem, before
Spark or Kafka is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from balancer.app.cli import main


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def test_an_unknown_policy_is_named_with_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _error(capsys, ["replay", str(tmp_path), "--policies", "ours,nope"])
    assert "nope" in err and "ours" in err


def test_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["replay", str(tmp_path / "absent")])
    assert "absent" in err and "no such recording" in err


def test_since_goes_with_kafka_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["replay", str(tmp_path), "--since", "2026-11-23T00:00Z"])
    assert "--from-kafka" in err


def test_a_bad_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["replay", "--from-kafka", "--since", "monday"])
    assert "monday" in err


def test_a_source_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    _error(capsys, ["replay"])
