"""The stream's settings come from the config only, with one mapping of the Kafka security
settings for the collector, the stream and the dead letters (password files included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from balancer.app.config import BalancerConfig
from balancer.app.stream_settings import kafka_security
from balancer.app.wiring import BalancerApp

SECRET = "s3cr3t-kafka-password"


def sasl_config(tmp_path: Path, **security: Any) -> BalancerConfig:
    return BalancerConfig.from_mapping(
        {
            "kafka": {
                "security": {
                    "protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "SCRAM-SHA-512",
                    "username": "balancer",
                    **security,
                }
            },
            "spark": {
                "checkpoint_dir": str(tmp_path / "ck"),
                "window_s": 180,
                "slide_s": 60,
                "num_buckets": 8,
                "shuffle_partitions": 6,
            },
            "detection": {"hit_count_threshold": 4},
            "clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:9"}],
            "controller": {
                "journal_path": str(tmp_path / "journal.sqlite3"),
                "audit_log_path": str(tmp_path / "audit.jsonl"),
            },
        }
    )


def test_run_takes_the_password_file_as_collect_does(tmp_path: Path) -> None:
    password = tmp_path / "kafka.password"
    password.write_text(SECRET + "\n")
    config = sasl_config(tmp_path, password_file=str(password))
    app = BalancerApp(config)
    try:
        settings = app.stream_settings()
    finally:
        app.stop()
    # The stream, its dead letters and the collector read the same file the same way.
    assert settings.security == kafka_security(config)
    kwargs = settings.security.client_kwargs(environ={})
    assert kwargs["sasl_plain_password"] == SECRET
    assert kwargs["sasl_plain_username"] == "balancer"
    # Only the file's path travels (Spark source options, reprs, logs); never the secret.
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings.source_options().to_options())
    assert settings.source_options().to_options()["sasl_password_file"] == str(password)


def test_the_stream_takes_the_configs_window_and_bucket_values(tmp_path: Path) -> None:
    app = BalancerApp(sasl_config(tmp_path, password_env="KAFKA_PASSWORD"))
    try:
        settings = app.stream_settings()
    finally:
        app.stop()
    assert (settings.window_s, settings.slide_s, settings.watermark_s) == (180, 60, 60)
    assert (settings.num_buckets, settings.shuffle_partitions) == (8, 6)
    assert settings.dead_letter_topic_name == "pulsar-topic-stats-dlq"
    assert settings.security.sasl_password_env == "KAFKA_PASSWORD"
