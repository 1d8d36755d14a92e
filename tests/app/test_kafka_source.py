"""`kafka.source: python | native`: one switch from the config to the stream, and a native
source without Spark's Kafka connector refused up front in one line naming the setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import main
from balancer.app.config import BalancerConfig, ConfigError, SparkConfig
from balancer.app.stream_settings import stream_settings
from streaming.spark.job import StreamConfigError, StreamSettings, read_native_raw
from streaming.spark.kafka_connector import CONNECTOR_JARS, connector_problem, spark_jars_dir
from tests.configs import machine_ok_config as base
from tests.configs import with_setting

# Files named as Maven publishes them (Spark 4, Scala 2.13).
JAR_FILES = (
    "spark-sql-kafka-0-10_2.13-4.1.0.jar",
    "spark-token-provider-kafka-0-10_2.13-4.1.0.jar",
    "kafka-clients-3.9.1.jar",
    "commons-pool2-2.12.1.jar",
)


def spark_home(tmp_path: Path, jars: tuple[str, ...]) -> Path:
    home = tmp_path / "spark-home"
    (home / "jars").mkdir(parents=True)
    for name in jars:
        (home / "jars" / name).write_bytes(b"PK")
    return home


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("source", ["python", "native"])
def test_the_config_takes_either_source_and_the_stream_gets_it(tmp_path: Path, source: str) -> None:
    config = BalancerConfig.from_mapping(with_setting(base(tmp_path), "kafka.source", source))
    assert config.kafka.source == source
    assert stream_settings(config).kafka_source == source


def test_the_default_is_the_python_source(tmp_path: Path) -> None:
    config = BalancerConfig.from_mapping(base(tmp_path))
    assert config.kafka.source == "python"
    assert stream_settings(config).kafka_source == "python"


@pytest.mark.parametrize("value", ["spark", "Native", "", 1, True])
def test_any_other_source_is_refused_naming_the_setting(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        BalancerConfig.from_mapping(with_setting(base(tmp_path), "kafka.source", value))
    [line] = str(info.value).splitlines()[1:]
    assert line.strip().startswith("kafka.source: ") and "'python' or 'native'" in line


def test_the_stream_settings_refuse_an_unknown_source() -> None:
    with pytest.raises(StreamConfigError, match="kafka_source must be one of python, native"):
        StreamSettings(
            bootstrap_servers="h:1",
            topic="t",
            checkpoint_dir="c",
            window_s=120,
            slide_s=60,
            watermark_s=60,
            max_offsets_per_trigger=None,
            trigger_interval_s=30.0,
            spark_master="local[2]",
            num_buckets=4,
            shuffle_partitions=2,
            jvm_options=SparkConfig().jvm_options,
            max_future_skew_s=600,
            kafka_source="spark",  # type: ignore[arg-type]
        )


def test_the_connector_is_looked_for_in_spark_homes_jars(tmp_path: Path) -> None:
    home = spark_home(tmp_path, JAR_FILES[:2])
    environ = {"SPARK_HOME": str(home)}
    assert spark_jars_dir(environ) == home / "jars"
    assert connector_problem(environ) == (
        f"{CONNECTOR_JARS[2]}, {CONNECTOR_JARS[3]} missing from {home / 'jars'}"
    )
    for name in JAR_FILES[2:]:
        (home / "jars" / name).write_bytes(b"PK")
    assert connector_problem(environ) is None


def test_without_spark_home_the_connector_is_looked_for_in_pysparks_jars() -> None:
    import pyspark

    jars = spark_jars_dir({})
    assert jars == Path(pyspark.__file__).parent / "jars"
    assert jars.is_dir()  # pyspark's own jars live there: the right directory


def test_validate_config_refuses_native_without_the_connector_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = spark_home(tmp_path, ())
    monkeypatch.setenv("SPARK_HOME", str(home))
    path = write(tmp_path, with_setting(base(tmp_path), "kafka.source", "native"))
    assert main(["validate-config", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"{path}: cannot run on this machine"
    [problem] = lines[1:]
    assert problem.strip().startswith("kafka.source: native needs Spark's Kafka connector")
    assert f"missing from {home / 'jars'}" in problem and "kafka.source: python" in problem
    # The file alone is valid: the connector is a matter of the machine that runs it.
    assert main(["validate-config", "--schema-only", str(path)]) == 0
    # With the jars in place the same config is valid here too.
    for name in JAR_FILES:
        (home / "jars" / name).write_bytes(b"PK")
    assert main(["validate-config", str(path)]) == 0


def test_run_refuses_native_without_the_connector_before_starting_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(spark_home(tmp_path, ())))
    path = write(tmp_path, with_setting(base(tmp_path), "kafka.source", "native"))
    assert main(["run", "--config", str(path), "--no-live", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert " kafka.source: native needs Spark's Kafka connector" in err
    assert "Traceback" not in err and "java" not in err.lower()


def test_the_native_reader_refuses_to_start_without_the_connector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Library use (tests, benchmarks) builds StreamSettings directly, without validate-config.
    monkeypatch.setenv("SPARK_HOME", str(spark_home(tmp_path, ())))
    settings = StreamSettings(
        bootstrap_servers="h:1",
        topic="t",
        checkpoint_dir="c",
        window_s=120,
        slide_s=60,
        watermark_s=60,
        max_offsets_per_trigger=None,
        trigger_interval_s=30.0,
        spark_master="local[2]",
        num_buckets=4,
        shuffle_partitions=2,
        jvm_options=SparkConfig().jvm_options,
        max_future_skew_s=600,
        kafka_source="native",
    )
    with pytest.raises(StreamConfigError, match="kafka_source 'native' needs Spark's Kafka"):
        read_native_raw(None, settings)  # type: ignore[arg-type]  # refused before Spark is used
