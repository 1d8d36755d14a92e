"""The standalone cluster launcher's CPU pinning (bench.capacity's one-core workers)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from bench import spark_cluster as launcher


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin apart")
def test_pinned_daemons_and_their_children_stay_on_their_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for spark-class that starts a child, as a worker starts its executor.
    script = tmp_path / "spark-class"
    script.write_text('#!/bin/sh\nsleep 60 &\necho $! > "$0.$$.child"\nwait\n')
    script.chmod(0o755)
    monkeypatch.setattr(launcher, "spark_class", lambda: script)
    cpus = sorted(os.sched_getaffinity(0))
    cluster = launcher.SparkCluster(master_port=0, webui_port=0, work_dir=tmp_path)
    try:
        pinned = launcher._start(cluster, "worker-1", [], dict(os.environ), frozenset(cpus[1:2]))
        free = launcher._start(cluster, "master", [], dict(os.environ))
        child_file = script.with_name(f"spark-class.{pinned.pid}.child")
        deadline = time.monotonic() + 10
        while not (child_file.exists() and child_file.read_text().strip()):
            assert time.monotonic() < deadline, "the stand-in never started its child"
            time.sleep(0.01)
        child = int(child_file.read_text())
        assert os.sched_getaffinity(pinned.pid) == {cpus[1]}
        assert os.sched_getaffinity(child) == {cpus[1]}
        assert os.sched_getaffinity(free.pid) == set(cpus)
    finally:
        for _, process in cluster.processes:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_pinning_more_cores_than_the_machine_has_is_refused() -> None:
    too_many = len(os.sched_getaffinity(0)) + 1
    with (
        pytest.raises(launcher.SparkClusterError, match="needs"),
        launcher.spark_cluster(workers=too_many, cores=1, pin_cpus=True),
    ):
        pass
