"""The job's Python daemon for Spark (`spark.python.daemon.module`): pyspark's own daemon
(`pyspark.daemon`), with two changes for a job that runs Python in every micro-batch.

Spark starts its Python workers by forking this daemon; a worker imports its worker module
(pandas, pyarrow, pyspark.sql...) after the fork and serves tasks until it exits. Measured
with py-spy over a 500,000-topic run, two costs of that were ~14 % of the workers' CPU:

- **Compiling pyspark on every worker start.** Spark puts `$SPARK_HOME/python/lib/pyspark.zip`
  first on the workers' path. Python caches no bytecode for a zip, so each new worker
  compiled pyspark's modules from source: importing the worker modules took ~0.9 s against
  ~0.2 s from the installed package. When the installed pyspark is the zip's version (a
  pip-installed pyspark ships both), the zips move to the end of the path, so the installed,
  compiled modules load; otherwise the path stays as Spark made it.
- **A full garbage collection after every task.** A reused worker runs `gc.collect()` between
  tasks, which walks every tracked object: the imported libraries, tens of thousands of
  them, again each task. After each task this daemon collects once and freezes what
  survived (`gc.freeze`, as Python's docs suggest for long-lived objects), so the next
  collection walks only what later tasks create. Frozen objects are still freed when their
  last reference goes; only a reference cycle among them would stay, and what survives a
  task is the worker's modules and caches.

Started by Spark as `python -m streaming.spark.daemon <worker module>`, like pyspark's.
"""

from __future__ import annotations

import gc
import importlib.metadata
import re
import sys
import zipfile
from collections.abc import Callable
from typing import Any

_SPARK_ZIPS = ("pyspark", "py4j")  # the zips Spark puts on its Python workers' path
_VERSION = re.compile(r"""__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""")


def zip_version(zip_path: str) -> str | None:
    """The pyspark version inside a `pyspark.zip`, or None if it has none."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            text = archive.read("pyspark/version.py").decode()
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    match = _VERSION.search(text)
    return match.group(1) if match else None


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def compiled_first(path: list[str], installed: str | None) -> list[str]:
    """`path` with Spark's pyspark and py4j zips moved to the end when the installed pyspark
    is the zip's version (its compiled modules then load first); else `path` unchanged."""
    names = {p: p.rsplit("/", 1)[-1] for p in path}
    zips = [p for p in path if names[p].endswith(".zip") and names[p].startswith(_SPARK_ZIPS)]
    spark_zips = [p for p in zips if names[p] == "pyspark.zip"]
    if not spark_zips or installed is None:
        return path
    if any(zip_version(p) != installed for p in spark_zips):
        return path
    return [p for p in path if p not in zips] + zips


def freezing_after(worker: Callable[..., int]) -> Callable[..., int]:
    """`worker` (pyspark.daemon's, one call serves one task), then one collection and a
    freeze of what survived, so the daemon's collection after each task is short."""

    def run_then_freeze(*args: Any) -> int:
        code = worker(*args)
        gc.collect()
        gc.freeze()
        return code

    return run_then_freeze


def main() -> None:
    sys.path[:] = compiled_first(sys.path, installed_version())
    import pyspark.daemon  # after the path is set: the compiled modules, when they match

    pyspark.daemon.worker = freezing_after(pyspark.daemon.worker)
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
