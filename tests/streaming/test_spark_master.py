"""Spark master URLs: what Spark accepts passes, the rest is refused before a JVM starts."""

from __future__ import annotations

import pytest

from streaming.spark.master import SparkMasterError, check_master


@pytest.mark.parametrize(
    "master",
    [
        "local", "local[1]", "local[2]", "local[*]", "local[4,3]", "local[*, 2]",
        "local-cluster[2,1,1024]", "spark://m1:7077", "spark://m1:7077,m2:7077",
        "spark://10.0.0.1:7077", "spark://[::1]:7077", "yarn",
        "k8s://https://kubernetes.default.svc:443", "k8s://kubernetes.example:6443",
        "k8s://http://127.0.0.1:8001",
    ],
)  # fmt: skip
def test_accepted(master: str) -> None:
    check_master(master)


@pytest.mark.parametrize(
    "master",
    [
        "yarn-please", "yarn-client", "local[0]", "local[]", "local[x]", "local[2", "LOCAL",
        "spark://", "spark://host", "spark://host:port", "spark://h:7077,", "spark://h:99999",
        "k8s://", "k8s:https://x", "mesos://zk:2181", "", " local", "local ", "http://h:1",
    ],
)  # fmt: skip
def test_refused(master: str) -> None:
    with pytest.raises(SparkMasterError):
        check_master(master)


def test_a_long_master_is_not_echoed_whole() -> None:
    with pytest.raises(SparkMasterError) as info:
        check_master("x" * 10_000)
    assert len(str(info.value)) < 300
