"""The stream's settings, from the config's values only: the one mapping of config to stream.

`BalancerApp` starts the stream with these; the property test in
tests/app/test_config_drift.py checks that every config `validate-config` accepts builds
them without error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from balancer.app.config import BalancerConfig
from balancer.kafka.security import KafkaSecurity

if TYPE_CHECKING:
    from streaming.spark.job import StreamSettings


def kafka_security(config: BalancerConfig) -> KafkaSecurity:
    """`kafka.security` for every Kafka client: the collector, the stream, the dead letters."""
    security = config.kafka.security
    return KafkaSecurity(
        security_protocol=security.protocol,
        sasl_mechanism=security.sasl_mechanism,
        sasl_username=security.username,
        sasl_password_env=security.password_env,
        sasl_password_file=None if security.password_file is None else str(security.password_file),
        ssl_cafile=None if security.ssl_ca_file is None else str(security.ssl_ca_file),
    )


def stream_settings(config: BalancerConfig, *, loopback: bool = True) -> StreamSettings:
    from streaming.spark.job import StreamSettings  # imports pyspark: only when a stream is built

    spark = config.spark
    kafka = config.kafka
    return StreamSettings(
        bootstrap_servers=",".join(kafka.bootstrap_servers),
        topic=kafka.stats_topic,
        dead_letter_topic=kafka.dead_letter_topic,
        checkpoint_dir=str(spark.checkpoint_dir),
        max_offsets_per_trigger=spark.max_offsets_per_trigger,
        window_s=spark.window_s,
        slide_s=spark.slide_s,
        watermark_s=spark.watermark_s,
        trigger_interval_s=float(spark.trigger_interval_s),
        spark_master=spark.master,
        security=kafka_security(config),
        kafka_source=kafka.source,
        loopback=loopback,
        max_future_skew_s=spark.max_future_skew_s,
        num_buckets=spark.num_buckets,
        shuffle_partitions=spark.shuffle_partitions,
        jvm_options=spark.jvm_options,
        clusters=tuple(c.name for c in config.clusters),
        # Progress bars would garble the live view and the logs.
        extra_spark_conf=(("spark.ui.showConsoleProgress", "false"),),
    )
