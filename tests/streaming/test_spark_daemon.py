"""The job's Python daemon: compiled pyspark when versions match, a frozen heap between tasks."""

from __future__ import annotations

import gc
import weakref
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming.spark.daemon import compiled_first, freezing_after, installed_version, zip_version


def spark_zip(directory: Path, version_line: str | None) -> str:
    path = directory / "pyspark.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pyspark/__init__.py", "")
        if version_line is not None:
            archive.writestr("pyspark/version.py", version_line + "\n")
    return str(path)


def test_the_zips_go_last_only_when_the_installed_pyspark_is_the_zips_version(
    tmp_path: Path,
) -> None:
    spark = spark_zip(tmp_path, "__version__: str = '4.3.0'")
    py4j = "/spark/python/lib/py4j-0.10.9.9-src.zip"
    path = ["", spark, py4j, "/venv/site-packages", "/other.zip"]
    assert zip_version(spark) == "4.3.0"
    assert compiled_first(path, "4.3.0") == ["", "/venv/site-packages", "/other.zip", spark, py4j]
    assert compiled_first(path, "4.2.1") == path  # another pyspark: Spark's own stays first
    assert compiled_first(path, None) == path
    assert compiled_first(["", "/venv/site-packages"], "4.3.0") == ["", "/venv/site-packages"]


def test_a_zip_without_a_readable_version_keeps_the_path(tmp_path: Path) -> None:
    no_version = spark_zip(tmp_path, None)
    assert zip_version(no_version) is None
    assert compiled_first(["", no_version, "/site"], "4.3.0") == ["", no_version, "/site"]
    assert zip_version(str(tmp_path / "absent.zip")) is None
    (tmp_path / "bad").mkdir()
    broken = tmp_path / "bad" / "pyspark.zip"
    broken.write_bytes(b"not a zip")
    assert zip_version(str(broken)) is None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_after_a_task_cycles_are_collected_and_survivors_frozen(unfrozen: None) -> None:
    kept = Node()
    cycle: list[weakref.ref[Node]] = []

    def task(sock: object, authenticated: bool) -> int:
        a, b = Node(), Node()
        a.other, b.other = b, a  # garbage only the cyclic collector frees
        cycle.append(weakref.ref(a))
        return 7

    gc.unfreeze()
    assert freezing_after(task)(None, True) == 7  # the worker's exit code passes through
    assert cycle[0]() is None
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)
    # The freeze count is no witness here: frozen objects that other threads drop by
    # reference count leave it, so it can shrink. An object made between two tasks is.
    survivor = Node()
    freezing_after(task)(None, True)
    assert gc.is_tracked(survivor)
    assert not any(
        tracked is survivor for generation in range(3) for tracked in gc.get_objects(generation)
    ), "what outlived the task is in the permanent generation"


def worker_facts(_: int) -> tuple[str, int, int]:
    import os

    import pyspark

    return pyspark.__file__ or "", os.getpid(), gc.get_freeze_count()


def test_spark_workers_load_compiled_pyspark_and_freeze_between_tasks(spark: Any) -> None:
    assert installed_version() is not None
    context = spark.sparkContext
    assert context.getConf().get("spark.python.daemon.module") == "streaming.spark.daemon"
    first = context.parallelize(range(4), 4).map(worker_facts).collect()
    second = context.parallelize(range(4), 4).map(worker_facts).collect()
    assert all(".zip" not in file and file.endswith("__init__.py") for file, _, _ in first + second)
    reused = [frozen for _, pid, frozen in second if pid in {pid for _, pid, _ in first}]
    assert reused, "Spark reuses its Python workers between tasks"
    assert all(frozen > 0 for frozen in reused)
