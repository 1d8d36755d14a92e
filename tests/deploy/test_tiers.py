"""The quick tier (README, "Develop") deselects by marker: a test that starts Spark or Kafka
through the shared fixtures carries its marker even when its module forgot it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import pytest_collection_modifyitems


class _Item:
    def __init__(self, *fixturenames: str) -> None:
        self.fixturenames = list(fixturenames)
        self.marks: list[str] = []

    def add_marker(self, mark: Any) -> None:
        self.marks.append(mark.name)


def test_a_test_asking_for_spark_or_kafka_is_marked_so() -> None:
    both, spark, plain = _Item("kafka", "spark", "tmp_path"), _Item("spark"), _Item("tmp_path")
    pytest_collection_modifyitems([both, spark, plain])  # type: ignore[list-item]
    assert sorted(both.marks) == ["kafka", "spark"]
    assert spark.marks == ["spark"] and plain.marks == []


def test_every_collected_test_using_a_server_fixture_carries_its_marker(
    request: pytest.FixtureRequest,
) -> None:
    for item in request.session.items:  # what this run selected (the full suite: everything)
        for fixture in {"spark", "kafka"} & set(getattr(item, "fixturenames", ())):
            assert item.get_closest_marker(fixture) is not None, item.nodeid
