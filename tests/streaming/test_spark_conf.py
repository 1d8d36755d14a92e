"""The Spark settings the job starts with (no Spark needed: `spark_conf` is a plain list)."""

from __future__ import annotations

import pytest

from streaming.spark.job import (
    ROCKSDB_PROVIDER,
    ROCKSDB_TUNING,
    StreamConfigError,
    StreamSettings,
    spark_conf,
)


def settings(**kwargs: object) -> StreamSettings:
    values: dict[str, object] = {
        "bootstrap_servers": "127.0.0.1:9092", "topic": "stats", "checkpoint_dir": "/tmp/ck",
        "window_s": 120, "slide_s": 60, "watermark_s": 60, "max_offsets_per_trigger": None,
        "trigger_interval_s": 30.0, "spark_master": "local[*]", "num_buckets": 4,
        "shuffle_partitions": 4, "max_future_skew_s": 600, "jvm_options": "-XX:TieredStopAtLevel=1",
        **kwargs,
    }  # fmt: skip
    return StreamSettings(**values)  # type: ignore[arg-type]


def effective(conf: list[tuple[str, str]]) -> dict[str, str]:
    return dict(conf)  # later entries win, as with SparkSession.builder.config


def test_the_state_store_is_rocksdb_with_its_tuning() -> None:
    conf = effective(spark_conf(settings()))
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert {k: conf[k] for k, _ in ROCKSDB_TUNING} == {
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    }


def test_no_row_checksum_on_the_shuffle_of_packs() -> None:
    conf = effective(spark_conf(settings()))
    assert conf["spark.sql.shuffle.orderIndependentChecksum.enabled"] == "false"


def test_python_workers_fork_from_the_jobs_daemon() -> None:
    conf = effective(spark_conf(settings()))
    assert conf["spark.python.daemon.module"] == "streaming.spark.daemon"


def test_the_jvms_start_with_the_configured_options_or_their_own_defaults() -> None:
    conf = effective(spark_conf(settings(jvm_options="-XX:TieredStopAtLevel=1 -Xss4m")))
    assert conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -Xss4m"
    assert conf["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -Xss4m"
    none = effective(spark_conf(settings(jvm_options="")))
    assert "spark.driver.extraJavaOptions" not in none
    assert "spark.executor.extraJavaOptions" not in none
    # A setting given as an extra Spark setting still wins (A/B runs: `--spark-conf`).
    extra = (("spark.driver.extraJavaOptions", ""),)
    assert (
        effective(spark_conf(settings(extra_spark_conf=extra)))["spark.driver.extraJavaOptions"]
        == ""
    )


def test_extra_settings_override_the_defaults_and_loopback_binds_to_127_0_0_1() -> None:
    extra = (("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "true"),)
    conf = effective(spark_conf(settings(extra_spark_conf=extra, shuffle_partitions=7)))
    assert conf["spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == "7"
    assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    assert "spark.driver.host" not in effective(spark_conf(settings(loopback=False)))


def test_the_stream_refuses_dead_letters_into_its_own_topic() -> None:
    with pytest.raises(StreamConfigError, match="dead_letter_topic must differ"):
        settings(topic="stats", dead_letter_topic="stats")
    assert settings(topic="stats", dead_letter_topic="stats", dead_letter_dir="/tmp/d")


def test_the_stream_refuses_a_master_spark_cannot_parse() -> None:
    with pytest.raises(StreamConfigError, match="yarn-please"):
        settings(spark_master="yarn-please")
