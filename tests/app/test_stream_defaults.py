"""The stream's defaults are the config's only (issue 34): `SparkConfig` declares each; the
stream's settings, the source's options and the standalone runner declare none of their own
for those settings, so none can disagree (num_buckets was 64 in the source and 4 in the
config, shuffle_partitions 4 in the stream and 2 in the config). No Spark needed."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import BalancerConfig, SparkConfig, load_config
from balancer.app.stream_settings import stream_settings
from streaming.read.source import SourceOptions
from streaming.spark.job import StreamSettings, spark_conf
from streaming.spark.standalone import parse_args

ROOT = Path(__file__).resolve().parents[2]
MINIMAL: dict[str, Any] = {"clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:8080"}]}

# StreamSettings field -> the SparkConfig setting it takes (`balancer.app.stream_settings`).
SETTING_OF_FIELD = {
    "checkpoint_dir": "checkpoint_dir",
    "window_s": "window_s",
    "slide_s": "slide_s",
    "watermark_s": "watermark_s",
    "trigger_interval_s": "trigger_interval_s",
    "max_offsets_per_trigger": "max_offsets_per_trigger",
    "max_future_skew_s": "max_future_skew_s",
    "num_buckets": "num_buckets",
    "shuffle_partitions": "shuffle_partitions",
    "spark_master": "master",
    "jvm_options": "jvm_options",
}
# SourceOptions fields that `StreamSettings.source_options` fills from those settings.
SOURCE_FIELDS = ("num_buckets", "pane_ms", "max_future_skew_ms", "max_offsets_per_trigger")
# The standalone runner's options for those settings, with a value each.
STANDALONE_OPTIONS = {
    "--window-s": "120", "--slide-s": "60", "--watermark-s": "60",
    "--trigger-interval-s": "30", "--max-offsets-per-trigger": "none",
    "--max-future-skew-s": "600", "--master": "local[2]", "--num-buckets": "4",
    "--shuffle-partitions": "2", "--jvm-options": "-XX:TieredStopAtLevel=1",
}  # fmt: skip
STANDALONE_REQUIRED = ["--bootstrap", "h:1", "--topic", "t", "--checkpoint", "c", "--reports", "r"]


def defaults_of(cls: type, names: Any) -> dict[str, object]:
    """The defaults `cls` (a dataclass) declares for those of its fields named."""
    declared = {f.name: f for f in fields(cls)}
    return {
        name: declared[name].default
        for name in names
        if declared[name].default is not MISSING or declared[name].default_factory is not MISSING
    }


def test_every_spark_setting_has_its_stream_field() -> None:
    # A setting added to the config is added here, and so checked below.
    assert sorted(SETTING_OF_FIELD.values()) == sorted(SparkConfig.model_fields)
    assert set(SETTING_OF_FIELD) <= {f.name for f in fields(StreamSettings)}


def test_the_stream_settings_declare_no_default_of_their_own() -> None:
    assert defaults_of(StreamSettings, SETTING_OF_FIELD) == {}


def test_the_source_options_declare_no_default_of_their_own() -> None:
    assert defaults_of(SourceOptions, SOURCE_FIELDS) == {}


@pytest.mark.parametrize("option", sorted(STANDALONE_OPTIONS))
def test_the_standalone_runner_declares_no_default_of_its_own(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--name=value`: a value starting with '-' (the JVM's options) is no option of its own.
    given = [f"{name}={value}" for name, value in STANDALONE_OPTIONS.items() if name != option]
    with pytest.raises(SystemExit):
        parse_args([*STANDALONE_REQUIRED, *given])
    assert option in capsys.readouterr().err  # argparse names the missing option
    args = parse_args([*STANDALONE_REQUIRED, *(f"{k}={v}" for k, v in STANDALONE_OPTIONS.items())])
    assert (args.num_buckets, args.shuffle_partitions, args.max_offsets_per_trigger) == (4, 2, None)
    assert args.jvm_options == SparkConfig().jvm_options


def test_run_streams_with_the_configs_defaults() -> None:
    config = BalancerConfig.from_mapping(MINIMAL)
    settings = stream_settings(config)
    spark = SparkConfig()
    for name, setting in SETTING_OF_FIELD.items():
        expected = getattr(spark, setting)
        assert getattr(settings, name) == (str(expected) if name == "checkpoint_dir" else expected)
    assert (settings.num_buckets, settings.shuffle_partitions) == (4, 2)
    assert dict(spark_conf(settings))["spark.sql.shuffle.partitions"] == "2"
    source = settings.source_options()
    assert (source.num_buckets, source.pane_ms) == (4, spark.slide_s * 1000)
    assert source.max_future_skew_ms == spark.max_future_skew_s * 1000
    assert source.max_offsets_per_trigger == spark.max_offsets_per_trigger
    # What the Spark source reads back from its options (the read tasks' settings).
    assert SourceOptions.from_options(source.to_options()) == source


def test_the_shipped_config_streams_with_the_defaults() -> None:
    spark = load_config(ROOT / "conf" / "balancer.yaml").spark
    assert (spark.num_buckets, spark.shuffle_partitions) == (4, 2)
    assert (spark.num_buckets, spark.shuffle_partitions) == (
        SparkConfig().num_buckets,
        SparkConfig().shuffle_partitions,
    )
