"""Source options, the per-trigger limit split and Kafka security settings (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.kafka.security import KafkaConfigError, KafkaSecurity
from streaming.read.kafka_offsets import split_limit
from streaming.read.partition_range import PartitionRange, consumer_config
from streaming.read.source import DEFAULT_BATCH_ROWS, SourceOptionError, SourceOptions

# The stream's settings as Spark options (the job passes the config's).
STREAM_OPTIONS = {"num_buckets": "4", "pane_ms": "60000", "max_future_skew_ms": "600000"}


@given(
    backlog=st.dictionaries(
        st.integers(0, 15), st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)), min_size=1
    ),
    limit=st.integers(1, 10**5),
)
def test_split_limit_reads_at_most_the_limit_fairly(
    backlog: dict[int, tuple[int, int]], limit: int
) -> None:
    start = {p: s for p, (s, _) in backlog.items()}
    available = {p: s + n for p, (s, n) in backlog.items()}
    end = split_limit(start, available, limit)
    taken = {p: end[p] - start[p] for p in start}
    total = sum(n for _, n in backlog.values())
    assert all(0 <= taken[p] <= available[p] - start[p] for p in start)
    assert sum(taken.values()) == min(total, limit)  # never more, and no capacity wasted
    if total > limit:  # nobody takes much more than its share of the limit
        for p, (_, n) in backlog.items():
            assert taken[p] <= n * limit / total + 2
        if limit >= len([n for _, n in backlog.values() if n]):  # and nobody with data starves
            assert all(taken[p] >= 1 for p, (_, n) in backlog.items() if n)


def test_split_limit_starves_no_partition_with_a_backlog() -> None:
    assert split_limit({0: 0, 1: 0}, {0: 1_000_000, 1: 1}, 10) == {0: 9, 1: 1}


def test_options_round_trip_through_spark_option_strings() -> None:
    options = SourceOptions(
        "k:9092",
        "stats",
        starting_offsets="latest",
        max_offsets_per_trigger=500,
        num_buckets=32,
        pane_ms=30_000,
        max_future_skew_ms=5_000,
        clusters=("east", "odd,name"),
        security=KafkaSecurity(
            "SASL_SSL", "SCRAM-SHA-512", "svc", sasl_password_env="KAFKA_PW", ssl_cafile="/ca.pem"
        ),
    )
    text = options.to_options()
    assert "KAFKA_PW" in text.values() and all(isinstance(v, str) for v in text.values())
    # Spark lower-cases option keys; the source reads them back the same.
    assert SourceOptions.from_options({k.upper(): v for k, v in text.items()}) == options


def test_a_flush_holds_the_default_events_unless_the_option_says_otherwise() -> None:
    """Spark's options and the dataclass agree on the flush size (packs of a backlog over
    many panes stay large: docs/decisions.md#flushes-of-100000-events)."""
    required = {"bootstrap_servers": "k:1", "topic": "t", **STREAM_OPTIONS}
    assert SourceOptions.from_options(required).batch_rows == DEFAULT_BATCH_ROWS
    options = SourceOptions(
        "k:1", "t", num_buckets=4, pane_ms=60_000, max_future_skew_ms=600_000,
        max_offsets_per_trigger=None,
    )  # fmt: skip
    assert options.batch_rows == DEFAULT_BATCH_ROWS == 100_000
    assert SourceOptions.from_options({**required, "batch_rows": "7"}).batch_rows == 7


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t"}, "bootstrap_servers and topic are required"),
        ({"bootstrap_servers": "k:1", "topic": "t", "starting_offsets": "middle"}, "earliest"),
        ({"bootstrap_servers": "k:1", "topic": "t", "max_offsets_per_trigger": "x"}, "integer"),
        ({"bootstrap_servers": "k:1", "topic": "t", "max_offsets_per_trigger": "0"}, ">= 1"),
        ({"bootstrap_servers": "k:1", "topic": "t", "num_buckets": ""}, "num_buckets is required"),
        ({"bootstrap_servers": "k:1", "topic": "t", "pane_ms": None}, "pane_ms is required"),
    ],
    ids=["missing", "bad-start", "not-a-number", "zero-limit", "no-buckets", "no-pane"],
)
def test_bad_options_fail_with_a_clear_message(
    options: dict[str, str | None], message: str
) -> None:
    # The stream's settings are required options: it always gives them (`to_options`).
    given = {**STREAM_OPTIONS, **options}
    with pytest.raises(SourceOptionError, match=message):
        SourceOptions.from_options({k: v for k, v in given.items() if v is not None})


def test_passwords_are_read_from_the_environment_only_when_a_client_is_built() -> None:
    security = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "svc", sasl_password_env="PW")
    assert "s3cret" not in repr(security)
    kwargs = security.client_kwargs({"PW": "s3cret"})
    assert kwargs["sasl_plain_password"] == "s3cret"
    assert kwargs["sasl_plain_username"] == "svc"
    native = security.native_options({"PW": "s3cret"})
    assert (
        native["kafka.sasl.mechanism"] == "PLAIN"
        and 'password="s3cret"' in native["kafka.sasl.jaas.config"]
    )


def test_a_missing_password_variable_is_named_not_shown() -> None:
    security = KafkaSecurity("SASL_SSL", "PLAIN", "svc", sasl_password_env="NOPE")
    with pytest.raises(KafkaConfigError, match="NOPE") as info:
        security.client_kwargs({})
    assert "svc" not in str(info.value)


def test_a_password_file_is_read(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    security = KafkaSecurity("SASL_SSL", "PLAIN", "svc", sasl_password_file=str(secret))
    assert security.client_kwargs({})["sasl_plain_password"] == "from-file"


def test_sasl_without_a_mechanism_is_refused() -> None:
    with pytest.raises(KafkaConfigError, match="sasl_mechanism"):
        KafkaSecurity("SASL_SSL")


def test_librdkafka_config_maps_the_same_settings_and_reads_passwords_when_built() -> None:
    security = KafkaSecurity(
        "SASL_SSL",
        "SCRAM-SHA-512",
        "svc",
        sasl_password_env="PW",
        ssl_cafile="/etc/ca.pem",
        ssl_certfile="/etc/client.pem",
        ssl_keyfile="/etc/client.key",
        ssl_password_env="KEY_PW",
    )
    assert "s3cret" not in repr(security) and "k3y" not in repr(security)
    config = security.librdkafka_config({"PW": "s3cret", "KEY_PW": "k3y"})
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.certificate.location": "/etc/client.pem",
        "ssl.key.location": "/etc/client.key",
        "ssl.key.password": "k3y",
    }
    # kafka-python gets the same values under its own names: one mapping of the settings.
    kwargs = security.client_kwargs({"PW": "s3cret", "KEY_PW": "k3y"})
    assert (kwargs["sasl_plain_password"], kwargs["ssl_password"]) == ("s3cret", "k3y")
    assert kwargs["ssl_cafile"] == config["ssl.ca.location"]


def test_librdkafka_config_of_plaintext_and_of_a_password_file(tmp_path: Path) -> None:
    assert KafkaSecurity().librdkafka_config({}) == {"security.protocol": "PLAINTEXT"}
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    security = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "svc", sasl_password_file=str(secret))
    config = security.librdkafka_config({})
    assert config["sasl.password"] == "from-file"
    assert not any(key.startswith("ssl.") for key in config)  # no TLS on SASL_PLAINTEXT


def test_librdkafka_config_names_a_missing_password_variable_not_its_value() -> None:
    security = KafkaSecurity("SSL", ssl_keyfile="/k", ssl_password_env="KEY_PW")
    with pytest.raises(KafkaConfigError, match="KEY_PW") as info:
        security.librdkafka_config({"OTHER": "k3y"})
    assert "k3y" not in str(info.value)


def test_a_client_error_quoting_a_password_is_redacted() -> None:
    from balancer.kafka.security import redact_secrets

    config = {"sasl.password": "s3cret", "ssl.key.password": "k3y", "sasl.username": "svc"}
    text = 'Invalid value "s3cret" for "sasl.password"; key k3y refused for svc'
    assert redact_secrets(text, config) == (
        'Invalid value "***" for "sasl.password"; key *** refused for svc'
    )


def test_a_read_task_consumer_that_cannot_be_built_shows_no_secret() -> None:
    security = KafkaSecurity(
        "SASL_SSL", "PLAIN", "svc", sasl_password_env="PW", ssl_cafile="/nonexistent/ca.pem"
    )
    config = consumer_config("127.0.0.1:1", security.librdkafka_config({"PW": "s3cret"}))
    config["sasl.mechanisms"] = "s3cret"  # librdkafka quotes the value it refuses
    task = PartitionRange(config, "t", 0, 0, 10, poll_timeout_s=0.1, read_timeout_s=1.0)
    assert "s3cret" not in repr(task)
    with pytest.raises(KafkaConfigError, match="cannot build the Kafka consumer") as info, task:
        pass
    assert "s3cret" not in str(info.value) and "***" in str(info.value)
