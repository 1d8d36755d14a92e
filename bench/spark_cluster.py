"""A Spark standalone cluster (one master, N workers) from the installed pyspark: tests, benchmarks.

    with spark_cluster(workers=2) as cluster:
        ...  # drivers connect to cluster.master_url (spark://127.0.0.1:<port>)

The master and the workers are `bin/spark-class` JVMs of the pyspark wheel, bound to
127.0.0.1 on free ports, each worker offering `cores` cores and `memory` to executors. The
helper waits until the master's web UI (`/json`) shows every worker alive, and stops them by
PID (SIGTERM, then SIGKILL), removing its work directory (worker, executor and local dirs).

Executors import this source tree: the workers run with PYTHONPATH starting at the repo root,
and executors and their Python workers inherit the workers' environment. (An editable install
would also do on a clean clone; with several checkouts sharing one venv it points at one of
them only.) The Python interpreter of the executors' workers is the driver's PYSPARK_PYTHON,
which `streaming.spark.job.build_spark` sets to the driver's own interpreter.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class SparkClusterError(RuntimeError):
    """The cluster did not come up."""


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SparkCluster:
    master_port: int
    webui_port: int
    work_dir: Path
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=5) as response:
            result: dict[str, Any] = json.load(response)
            return result

    def log_tail(self, chars: int = 3000) -> str:
        """The end of each daemon's log, for failure messages."""
        parts = []
        for name, _ in self.processes:
            path = self.work_dir / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def wait_for_workers(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for name, process in self.processes:
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"{name} exited with code {process.returncode}\n{self.log_tail()}"
                    )
            with contextlib.suppress(OSError, ValueError):
                if self.state().get("aliveworkers", 0) >= count:
                    return
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"{count} workers not alive within {timeout_s} s\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def stop(self, grace_s: float = 10.0) -> None:
        # Workers first: the master would otherwise log each one as lost. A worker stopped
        # by SIGTERM stops its executors too.
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            # Whatever a daemon left in its process group (an executor of a killed worker,
            # its Python workers) goes with it: each daemon leads a session of its own.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def _env(work_dir: Path, daemon_memory: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    # Executors' block manager and state store scratch space, removed with the cluster.
    env["SPARK_LOCAL_DIRS"] = str(work_dir / "local")
    env["SPARK_DAEMON_MEMORY"] = daemon_memory  # the master's and workers' own heaps
    env.pop("SPARK_HOME", None)  # spark-class finds the wheel's own
    return env


def _start(
    cluster: SparkCluster,
    name: str,
    args: list[str],
    env: dict[str, str],
    cpus: frozenset[int] | None = None,
) -> subprocess.Popen[bytes]:
    # Pinned before exec, so every thread and child (the executor JVM a worker starts, its
    # Python workers) inherits the mask.
    pin = None if cpus is None else functools.partial(os.sched_setaffinity, 0, cpus)
    with (cluster.work_dir / f"{name}.log").open("ab") as log:
        # spark-class execs java: this PID is the daemon's JVM.
        process = subprocess.Popen(
            [str(spark_class()), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C of the tests does not reach it first
            preexec_fn=pin,  # before exec: the JVM's threads and children inherit it
        )
    cluster.processes.append((name, process))
    return process


@contextlib.contextmanager
def spark_cluster(
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    daemon_memory: str = "256m",
    start_timeout_s: float = 120.0,
    pin_cpus: bool = False,
) -> Iterator[SparkCluster]:
    """A running standalone cluster; stopped (and its work dir removed) on exit.

    `pin_cpus` confines worker i (and the executors and Python workers it starts) to CPUs
    i*cores .. i*cores+cores-1, as a Kubernetes executor pod with a CPU limit of `cores`
    would be; Spark's `--cores` alone only caps the task slots, and an executor's threads
    and Python workers may run on any core. The master and the driver stay unpinned.
    """
    if pin_cpus:
        available = sorted(os.sched_getaffinity(0))
        if workers * cores > len(available):
            raise SparkClusterError(
                f"pinning {workers} workers of {cores} cores needs {workers * cores} CPUs; "
                f"this process may use {len(available)}"
            )
    work_dir = Path(tempfile.mkdtemp(prefix="spark-cluster-"))
    (work_dir / "local").mkdir()
    cluster = SparkCluster(master_port=free_port(), webui_port=free_port(), work_dir=work_dir)
    env = _env(work_dir, daemon_memory)
    try:
        _start(
            cluster,
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1",
                "--port", str(cluster.master_port),
                "--webui-port", str(cluster.webui_port),
            ],
            env,
        )  # fmt: skip
        # Workers that find no master retry only after 5-15 s: start them once it answers.
        cluster.wait_for_workers(0, start_timeout_s)
        for i in range(workers):
            worker_dir = work_dir / f"worker-{i}"
            worker_dir.mkdir()
            _start(
                cluster,
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host", "127.0.0.1",
                    "--port", str(free_port()),
                    "--webui-port", str(free_port()),
                    "--cores", str(cores),
                    "--memory", memory,
                    "--work-dir", str(worker_dir),
                    cluster.master_url,
                ],
                env,
                frozenset(available[i * cores : (i + 1) * cores]) if pin_cpus else None,
            )  # fmt: skip
        cluster.wait_for_workers(workers, start_timeout_s)
        yield cluster
    finally:
        cluster.stop()
