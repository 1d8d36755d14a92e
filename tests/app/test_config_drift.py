"""Settings that cannot drift (issue 13): whatever the config validator accepts, the stream
accepts; whatever it refuses, it refuses naming the setting. Configs are generated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.app.config import BalancerConfig, ConfigError
from balancer.app.stream_settings import stream_settings

MASTERS = [
    "local", "local[2]", "local[*]", "local[3,2]", "local[0]", "local[]", "yarn", "yarn-please",
    "spark://m:7077", "spark://m", "spark://a:1,b:2", "k8s://https://k:443", "k8s://", "mesos://z:1",
]  # fmt: skip
TOPICS = ["pulsar-topic-stats", "pulsar-topic-stats-dlq", "stats", "dead"]
ADDRESSES = ["127.0.0.1", "0.0.0.0", "localhost", "::", "a b", "10.0.0.1:9464", "-bad-"]
PASSWORD_ENV = "KAFKA_PASSWORD"


@pytest.fixture(scope="module")
def password_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "kafka.password"
    path.write_text("pw\n")
    return path


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value for a setting, or None to leave the setting out (its default)."""
    return st.none() | strategy


def present(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def security(password: str) -> st.SearchStrategy[dict[str, Any]]:
    entries = {
        "protocol": maybe(st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])),
        "sasl_mechanism": maybe(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])),
        "username": maybe(st.just("balancer")),
        "password_env": maybe(st.just(PASSWORD_ENV)),
        "password_file": maybe(st.just(password)),
    }
    return st.fixed_dictionaries(entries).map(present)


def configs(password: str) -> st.SearchStrategy[dict[str, Any]]:
    """Dotted setting -> value, for the settings the stream depends on."""
    values = {
        # Usual values half the time, anything the type allows the other half: most
        # generated configs must be valid for the stream side to be exercised.
        "spark.window_s": maybe(st.sampled_from([60, 120, 180, 300]) | st.integers(-5, 400)),
        "spark.slide_s": maybe(st.sampled_from([30, 60, 120]) | st.integers(-5, 400)),
        "spark.watermark_s": maybe(st.integers(-5, 400)),
        "spark.trigger_interval_s": maybe(st.integers(-2, 100)),
        "spark.max_offsets_per_trigger": maybe(st.integers(-1, 10**6)),
        "spark.master": maybe(st.sampled_from(MASTERS) | st.text(max_size=20)),
        "detection.hit_count_threshold": maybe(st.integers(-1, 12)),
        "kafka.stats_topic": maybe(st.sampled_from(TOPICS)),
        "kafka.dead_letter_topic": maybe(st.sampled_from(TOPICS)),
        "kafka.security": st.none() | security(password) | security(password),
        "kafka.source": maybe(st.sampled_from(["python", "native"]) | st.text(max_size=8)),
        "metrics.bind_address": maybe(st.sampled_from(ADDRESSES)),
    }
    return st.fixed_dictionaries(values).map(present)


def as_mapping(chosen: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:8080"}]}
    for dotted, value in chosen.items():
        section, key = dotted.split(".")
        data.setdefault(section, {})[key] = value
    return data


def test_generated_configs_never_drift_from_the_stream(password_file: Path) -> None:
    @settings(max_examples=1500, deadline=None)
    @given(chosen=configs(str(password_file)))
    def check(chosen: dict[str, Any]) -> None:
        try:
            config = BalancerConfig.from_mapping(as_mapping(chosen))
        except ConfigError as exc:
            # Every problem line names one of the settings that were set.
            lines = str(exc).splitlines()[1:]
            assert lines
            for line in lines:
                assert any(name in line for name in chosen), (line, chosen)
            return
        built = stream_settings(config)  # raises if the stream would refuse the config
        spec = built.window_spec
        assert (spec.window_s, spec.slide_s) == (config.spark.window_s, config.spark.slide_s)
        assert built.spark_master == config.spark.master
        assert built.dead_letter_topic_name != built.topic
        assert built.kafka_source == config.kafka.source
        # The Kafka clients can be built: the password comes from its file or variable.
        built.security.client_kwargs(environ={PASSWORD_ENV: "pw"})

    check()
