"""Spark's own Kafka connector (`kafka.source: native`): is it where Spark will load it from?

The native source is Spark's `kafka` format, which lives in the spark-sql-kafka-0-10 jar and
its dependencies, none of which pyspark ships. Without them the stream fails only once a
query starts, with a long Java traceback; `validate-config`, `run` and the job check up
front instead and say which jars are missing from which directory.

The supported place is the jars directory of the Spark that runs the job, the one Spark
puts on the classpath of the driver and of every executor: `$SPARK_HOME/jars`, or the
installed pyspark package's `jars` when SPARK_HOME is not set (as pyspark itself decides).
Checked with a directory listing only: no JVM is started, pyspark is not imported.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args

# The stream's Kafka readers (config `kafka.source`): "python", our kafka-python source that
# parses in its read tasks; "native", Spark's `kafka` format, parsed by mapInArrow.
KafkaSource = Literal["python", "native"]
KAFKA_SOURCES: tuple[KafkaSource, ...] = get_args(KafkaSource)

# Maven artifacts of org.apache.spark:spark-sql-kafka-0-10_2.13 and what it needs at run
# time (its compile dependencies not already in Spark's own jars).
CONNECTOR_JARS = (
    "spark-sql-kafka-0-10_*.jar",
    "spark-token-provider-kafka-0-10_*.jar",
    "kafka-clients-*.jar",
    "commons-pool2-*.jar",
)


def spark_jars_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The directory Spark loads its jars from; None when no Spark is installed."""
    env = os.environ if environ is None else environ
    home = env.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def missing_connector_jars(jars_dir: Path | None) -> list[str]:
    """The patterns of `CONNECTOR_JARS` with no matching file in `jars_dir`."""
    if jars_dir is None or not jars_dir.is_dir():
        return list(CONNECTOR_JARS)
    return [pattern for pattern in CONNECTOR_JARS if not any(jars_dir.glob(pattern))]


def connector_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Which connector jars are missing from where, in one line; None when all are there."""
    jars_dir = spark_jars_dir(environ)
    missing = missing_connector_jars(jars_dir)
    if not missing:
        return None
    where = str(jars_dir) if jars_dir is not None else "Spark's jars directory (no Spark found)"
    return f"{', '.join(missing)} missing from {where}"
