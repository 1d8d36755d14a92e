"""The streaming job: Kafka -> validated events -> per-topic windows -> per-bundle snapshots.

    settings = stream_settings(config)  # balancer.app.stream_settings: the config's values
    spark = build_spark(settings)
    query = start_stream(spark, settings, handler, layouts)

The plan is kept lean (fixed cost per micro-batch matters): one scan whose read tasks parse
and validate, one `observe` gathering side rows (summaries and rejects) in the same pass,
one windowed aggregation, and the foreachBatch step (`streaming.driver.batch.BatchProcessor`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from balancer.core.report import BatchHandler, LayoutProvider
from balancer.kafka.security import KafkaSecurity
from streaming.driver.batch import OBSERVATION_NAME, BatchProcessor
from streaming.driver.deadletters import DeadLetterSink, DirectoryDeadLetters, KafkaDeadLetters
from streaming.read.parse import parse_records
from streaming.read.source import SOURCE_NAME, SourceOptions, register_source
from streaming.shared.schema import PARSED_SPARK_SCHEMA, RowKind
from streaming.spark import daemon
from streaming.spark.kafka_connector import KAFKA_SOURCES, KafkaSource, connector_problem
from streaming.spark.master import SparkMasterError, check_master
from streaming.stage.windows import WindowSpec, topic_windows

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# Measured ~20 % less Spark time per batch at 250k topics
# (docs/decisions.md#rocksdb-state-store-tuned): no row count
# kept (it costs a read before every write; the job does not use the metric), and commits
# write a changelog instead of uploading a snapshot every batch. extra_spark_conf overrides.
ROCKSDB_TUNING = (
    ("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false"),
    ("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"),
)


class StreamConfigError(ValueError):
    """Stream settings that cannot work."""


@dataclass(frozen=True, kw_only=True)
class StreamSettings:
    bootstrap_servers: str
    topic: str
    checkpoint_dir: str
    # No defaults for what the config sets (balancer.app.config.SparkConfig, the one set of
    # defaults; tests/app/test_stream_defaults.py): the deployed app passes the config's
    # values, tests and benchmarks say which ones they run with.
    window_s: int
    slide_s: int
    watermark_s: int
    max_offsets_per_trigger: int | None  # None: no limit
    trigger_interval_s: float
    spark_master: str
    # PIP-157 topic buckets: the window state is kept per bucket. Each bucket costs 10-20 ms
    # per batch in the stateful operator, so a few per shuffle partition (docs/pipeline.md).
    num_buckets: int
    shuffle_partitions: int
    # The JVMs' options, driver and executors ("": the JVM's defaults). Set before the JVM
    # starts: a session the builder creates (local mode, or a client-mode driver).
    jvm_options: str
    # Events stamped further ahead of the read task's wall clock are dead-lettered
    # (timestamp_in_future).
    max_future_skew_s: int
    dead_letter_topic: str | None = None  # default: "<topic>-dead-letters"
    dead_letter_dir: str | None = None  # when set, dead letters go to files instead
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    # "python": our kafka-python source, parsing in its read tasks. "native": Spark's `kafka`
    # format (needs the connector jars, streaming.spark.kafka_connector) + mapInArrow parsing.
    kafka_source: KafkaSource = "python"
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    ui_enabled: bool = False
    loopback: bool = True  # bind the driver to 127.0.0.1 (local runs and tests)
    app_name: str = "pulsar-balancer-stream"
    extra_spark_conf: tuple[tuple[str, str], ...] = ()
    # Events of other clusters are dead-lettered (unknown_cluster); () accepts all.
    clusters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        WindowSpec(self.window_s, self.slide_s, self.watermark_s)  # validates
        try:
            check_master(self.spark_master)
        except SparkMasterError as exc:
            raise StreamConfigError(f"spark master {exc}") from None
        if self.trigger_interval_s <= 0:
            raise StreamConfigError("trigger_interval_s must be > 0")
        if not self.checkpoint_dir:
            raise StreamConfigError("checkpoint_dir is required (offsets and state live there)")
        if self.dead_letter_dir is None and self.dead_letter_topic_name == self.topic:
            # A rejected message written back to the topic read would loop forever.
            raise StreamConfigError(f"dead_letter_topic must differ from topic {self.topic!r}")
        if self.max_future_skew_s <= 0:
            raise StreamConfigError("max_future_skew_s must be > 0")
        if self.kafka_source not in KAFKA_SOURCES:
            raise StreamConfigError(
                f"kafka_source must be one of {', '.join(KAFKA_SOURCES)}, got {self.kafka_source!r}"
            )

    @property
    def window_spec(self) -> WindowSpec:
        return WindowSpec(self.window_s, self.slide_s, self.watermark_s)

    @property
    def dead_letter_topic_name(self) -> str:
        return self.dead_letter_topic or f"{self.topic}-dead-letters"

    def source_options(self, *, raw: bool = False) -> SourceOptions:
        return SourceOptions(
            bootstrap_servers=self.bootstrap_servers,
            topic=self.topic,
            starting_offsets=self.starting_offsets,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            raw=raw,
            num_buckets=self.num_buckets,
            pane_ms=self.slide_s * 1000,
            security=self.security,
            max_future_skew_ms=self.max_future_skew_s * 1000,
            clusters=self.clusters,
        )


def spark_conf(settings: StreamSettings) -> list[tuple[str, str]]:
    """The Spark settings of the job, in order (later entries win: `extra_spark_conf` last)."""
    conf = [
        ("spark.ui.enabled", str(settings.ui_enabled).lower()),
        ("spark.sql.shuffle.partitions", str(settings.shuffle_partitions)),
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.sql.streaming.noDataMicroBatches.enabled", "true"),
        ("spark.sql.execution.arrow.pyspark.enabled", "true"),
        # A checksum over every shuffled row, to detect a non-deterministic stage being
        # retried: ours is deterministic, and XXH64 over each pack cost ~30 % of the JVM.
        ("spark.sql.shuffle.orderIndependentChecksum.enabled", "false"),
        # pyspark's daemon, loading compiled pyspark and freezing what outlives a task.
        ("spark.python.daemon.module", daemon.__name__),
    ]
    if settings.loopback:
        conf += [("spark.driver.bindAddress", "127.0.0.1"), ("spark.driver.host", "127.0.0.1")]
    # transformWithState (the window stage) runs on RocksDB only.
    conf += [("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)]
    conf += list(ROCKSDB_TUNING)
    if settings.jvm_options:
        conf += [
            ("spark.driver.extraJavaOptions", settings.jvm_options),
            ("spark.executor.extraJavaOptions", settings.jvm_options),
        ]
    return conf + list(settings.extra_spark_conf)


def build_spark(settings: StreamSettings) -> SparkSession:
    """A SparkSession for the job; registers the Kafka source."""
    # Workers must run this interpreter: it has pyarrow and this package installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if settings.loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(settings.spark_master).appName(settings.app_name)
    for key, value in spark_conf(settings):
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register_source(spark)
    return spark


ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _parse_arrow(
    num_buckets: int, slide_ms: int, max_future_skew_ms: int, clusters: tuple[str, ...]
) -> ArrowMap:
    known = frozenset(clusters) or None

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            values = batch.column("value").to_pylist()
            partitions = batch.column("partition").to_pylist()
            offsets = batch.column("offset").to_pylist()
            yield from parse_records(
                values, partitions, offsets, num_buckets=num_buckets, slide_ms=slide_ms,
                now_ms=int(time.time() * 1000), max_future_skew_ms=max_future_skew_ms,
                clusters=known,
            )  # fmt: skip

    return parse


def read_parsed(spark: SparkSession, settings: StreamSettings) -> DataFrame:
    """The parsed stream (all row kinds), from the Kafka reader the settings choose."""
    if settings.kafka_source == "native":
        return parse_raw(read_native_raw(spark, settings), settings)
    options = settings.source_options().to_options()
    return spark.readStream.format(SOURCE_NAME).options(**options).load()


def read_native_raw(spark: SparkSession, settings: StreamSettings) -> DataFrame:
    """Spark's `kafka` format, projected to the raw columns `(partition, offset, value)`."""
    problem = connector_problem()
    if problem is not None:
        # Spark would fail only when the query starts, with a Java traceback.
        raise StreamConfigError(
            "kafka_source 'native' needs Spark's Kafka connector, not installed here: "
            f"{problem} (add those jars there, or use kafka_source 'python')"
        )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", settings.topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", "true")
        .options(**settings.security.native_options())
    )
    if settings.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    return reader.load().select(
        F.col("partition").cast("int"), F.col("offset").cast("long"), F.col("value")
    )


def parse_raw(raw: DataFrame, settings: StreamSettings) -> DataFrame:
    """Raw rows parsed by `mapInArrow` with the read task's validator (the native path)."""
    parse = _parse_arrow(
        settings.num_buckets,
        settings.slide_s * 1000,
        settings.max_future_skew_s * 1000,
        settings.clusters,
    )
    return raw.mapInArrow(parse, PARSED_SPARK_SCHEMA)


def observe_side_rows(parsed: DataFrame) -> DataFrame:
    """Gather the summaries and rejects of each batch in the same pass as the windows."""
    reject = F.when(
        F.col("kind") == int(RowKind.REJECT),
        F.to_json(F.struct("raw", "reason", "detail", "kafka_partition", "kafka_offset")),
    )
    return parsed.observe(
        OBSERVATION_NAME,
        F.collect_list("summary").alias("summaries"),
        F.collect_list(reject).alias("rejects"),
    )


def build_pipeline(spark: SparkSession, settings: StreamSettings) -> DataFrame:
    """Closed per-topic windows (append mode), with side rows observed on the way."""
    parsed = observe_side_rows(read_parsed(spark, settings))
    return topic_windows(
        parsed,
        settings.window_spec,
        num_buckets=settings.num_buckets,
        shuffle_partitions=settings.shuffle_partitions,
    )


def dead_letter_sink(settings: StreamSettings) -> DeadLetterSink:
    if settings.dead_letter_dir:
        return DirectoryDeadLetters(Path(settings.dead_letter_dir), source_topic=settings.topic)
    return KafkaDeadLetters.connect(
        bootstrap_servers=settings.bootstrap_servers,
        topic=settings.dead_letter_topic_name,
        source_topic=settings.topic,
        client_kwargs=settings.security.client_kwargs(),
    )


def start_stream(
    spark: SparkSession,
    settings: StreamSettings,
    handler: BatchHandler,
    layouts: LayoutProvider,
    *,
    available_now: bool = False,
    dead_letters: DeadLetterSink | None = None,
) -> StreamingQuery:
    """Start the job. `available_now` processes what is in Kafka now, then stops."""
    processor = BatchProcessor(
        spec=settings.window_spec,
        handler=handler,
        layouts=layouts,
        dead_letters=dead_letters or dead_letter_sink(settings),
    )
    writer = (
        build_pipeline(spark, settings)
        .writeStream.outputMode("append")
        .foreachBatch(processor)
        .option("checkpointLocation", settings.checkpoint_dir)
        .queryName(settings.app_name)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_s} seconds")
    # The processor reads each batch's observations through the query: hand it over.
    query = writer.start()
    processor.attach(query)
    return query


def run_available(
    spark: SparkSession,
    settings: StreamSettings,
    handler: BatchHandler,
    layouts: LayoutProvider,
    *,
    dead_letters: DeadLetterSink | None = None,
    timeout_s: float | None = None,
) -> StreamingQuery:
    """Process everything in Kafka now (Trigger.AvailableNow) and wait for the end."""
    query = start_stream(
        spark, settings, handler, layouts, available_now=True, dead_letters=dead_letters
    )
    query.awaitTermination(timeout_s)
    if query.isActive:
        query.stop()
        raise TimeoutError(f"stream did not finish within {timeout_s} s")
    error = query.exception()
    if error is not None:
        raise error
    return query
