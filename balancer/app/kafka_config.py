"""`kafka:` of the configuration: brokers, the stats, context and dead-letter topics, security
and how the stream reads. Kept apart from `config` (already long); `BalancerConfig` nests it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from balancer.app.config_base import FrozenModel, env_name
from streaming.spark.kafka_connector import KafkaSource


class KafkaSecurityConfig(FrozenModel):
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = None
    password_file: Path | None = None
    password_env: str | None = None
    ssl_ca_file: Path | None = None

    check_env = field_validator("password_env")(env_name)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.password_file is not None and self.password_env is not None:
            raise ValueError("give password_file or password_env, not both")
        if self.protocol.startswith("SASL"):
            # What the Kafka clients need to log in (balancer.kafka.security refuses less).
            missing = [
                name
                for name, value in (
                    ("kafka.security.sasl_mechanism", self.sasl_mechanism),
                    ("kafka.security.username", self.username),
                    (
                        "kafka.security.password_file or password_env",
                        self.password_file or self.password_env,
                    ),
                )
                if value is None
            ]
            if missing:
                raise ValueError(f"protocol {self.protocol} needs {' and '.join(missing)}")
        return self


class KafkaConfig(FrozenModel):
    bootstrap_servers: tuple[str, ...] = Field(default=("127.0.0.1:9092",), min_length=1)
    stats_topic: str = Field(default="pulsar-topic-stats", min_length=1)
    dead_letter_topic: str = Field(default="pulsar-topic-stats-dlq", min_length=1)
    # One record per collector round and cluster: the broker load reports read in it (moves
    # on only), for the replay (`balancer.core.context_record`). Same retention as stats_topic.
    context_topic: str = Field(default="pulsar-topic-stats-context", min_length=1)
    # Brokers marked draining (`pulsar-balancer drain`): compacted, one partition, created if
    # missing; every balancer of the peer group and every `drain` command share it.
    drain_marks_topic: str = Field(default="pulsar-balancer-drain-marks", min_length=1)
    security: KafkaSecurityConfig = KafkaSecurityConfig()
    # How the stream reads stats_topic: "python", the kafka-python source parsing in its read
    # tasks (works everywhere); "native", Spark's own `kafka` format, which needs the
    # spark-sql-kafka-0-10 jars in Spark's jars directory (checked by validate-config).
    source: KafkaSource = "python"

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split_servers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(s.strip() for s in value.split(",") if s.strip())
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for server in value:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or "@" in host:
                raise ValueError(f"{server!r} is not host:port")
        return value

    @model_validator(mode="after")
    def _dead_letters_elsewhere(self) -> Self:
        # The stream reads stats_topic; a rejected message written back there would be read
        # and rejected again, forever.
        if self.dead_letter_topic == self.stats_topic:
            raise ValueError(
                f"kafka.dead_letter_topic must differ from kafka.stats_topic "
                f"({self.stats_topic!r}): a rejected message would be read again forever"
            )
        return self

    @model_validator(mode="after")
    def _context_elsewhere(self) -> Self:
        # The stream would reject every context record as a bad event (and the replay every
        # stats message as a bad context record).
        if self.context_topic in (self.stats_topic, self.dead_letter_topic):
            raise ValueError(
                f"kafka.context_topic ({self.context_topic!r}) must differ from "
                "kafka.stats_topic and kafka.dead_letter_topic"
            )
        return self
