"""Kafka connection settings shared by the source, the dead-letter producer and the collector.

One mapping of the settings for every client: kafka-python (`client_kwargs`), librdkafka
through confluent-kafka (`librdkafka_config`, the source's read tasks) and Spark's native
`kafka` format (`native_options`).

Secrets are never held in these values: a password is named by the environment variable or
file that holds it (`sasl_password_env`, `sasl_password_file`, `ssl_password_env`) and read
only when a client is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_OPTION_KEYS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password_env",
    "sasl_password_file",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password_env",
)


# Our file settings and librdkafka's names for them.
_LIBRDKAFKA_SSL_FILES = (
    ("ssl_cafile", "ssl.ca.location"),
    ("ssl_certfile", "ssl.certificate.location"),
    ("ssl_keyfile", "ssl.key.location"),
)

# librdkafka properties whose values are secrets: never shown in a message.
LIBRDKAFKA_SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password"})


class KafkaConfigError(ValueError):
    """Kafka connection settings that cannot work (the message never holds a secret)."""


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password_env: str | None = None  # name of the env var holding the password
    sasl_password_file: str | None = None  # or a file holding it
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password_env: str | None = None  # name of the env var holding the key password

    def __post_init__(self) -> None:
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise KafkaConfigError(f"unknown security_protocol {self.security_protocol!r}")
        sasl = self.security_protocol.startswith("SASL")
        if sasl and (self.sasl_mechanism is None or self.sasl_username is None):
            raise KafkaConfigError(
                f"{self.security_protocol} needs sasl_mechanism and sasl_username"
            )

    def to_options(self) -> dict[str, str]:
        """As data source options (strings; passwords stay env var names)."""
        return {k: str(getattr(self, k)) for k in _OPTION_KEYS if getattr(self, k) is not None}

    def sasl_password(self, environ: Mapping[str, str] | None = None) -> str:
        """The SASL password, read now from its file or environment variable."""
        if self.sasl_password_file:
            try:
                return Path(self.sasl_password_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise KafkaConfigError(
                    f"cannot read sasl_password_file {self.sasl_password_file}: {exc.strerror}"
                ) from None
        env = os.environ if environ is None else environ
        return _secret(env, self.sasl_password_env, "sasl_password_env")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSecurity:
        values: dict[str, Any] = {k: options[k] for k in _OPTION_KEYS if options.get(k)}
        return cls(**values)

    def client_kwargs(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Keyword arguments for kafka-python clients; reads the passwords from the environment."""
        env = os.environ if environ is None else environ
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL"):
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.sasl_username
            out["sasl_plain_password"] = self.sasl_password(env)
        if self.security_protocol.endswith("SSL"):
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, key) is not None:
                    out[key] = getattr(self, key)
            if self.ssl_password_env:
                out["ssl_password"] = _secret(env, self.ssl_password_env, "ssl_password_env")
        return out

    def librdkafka_config(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """librdkafka (confluent-kafka) config properties; reads the passwords now.

        The same settings as `client_kwargs`, under librdkafka's names, so a deployment
        configures its security once whatever client reads.
        """
        env = os.environ if environ is None else environ
        out: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL"):
            out["sasl.mechanisms"] = str(self.sasl_mechanism)
            out["sasl.username"] = str(self.sasl_username)
            out["sasl.password"] = self.sasl_password(env)
        if self.security_protocol.endswith("SSL"):
            for ours, theirs in _LIBRDKAFKA_SSL_FILES:
                value = getattr(self, ours)
                if value is not None:
                    out[theirs] = value
            if self.ssl_password_env:
                out["ssl.key.password"] = _secret(env, self.ssl_password_env, "ssl_password_env")
        return out

    def native_options(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Options for Spark's native `kafka` format (`kafka.`-prefixed consumer properties)."""
        env = os.environ if environ is None else environ
        out: dict[str, str] = {"kafka.security.protocol": str(self.security_protocol)}
        if self.security_protocol.startswith("SASL"):
            password = self.sasl_password(env)
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            out["kafka.sasl.mechanism"] = str(self.sasl_mechanism)
            out["kafka.sasl.jaas.config"] = (
                f'{module} required username="{self.sasl_username}" password="{password}";'
            )
        if self.security_protocol.endswith("SSL") and self.ssl_cafile:
            out["kafka.ssl.truststore.type"] = "PEM"
            out["kafka.ssl.truststore.location"] = self.ssl_cafile
        return out


def redact_secrets(text: str, config: Mapping[str, object]) -> str:
    """`text` (a client's error message) with the secret values of `config` masked.

    librdkafka may quote a property's value when it refuses it; a message we raise or log
    must never carry a password.
    """
    for key in LIBRDKAFKA_SECRET_KEYS:
        secret = config.get(key)
        if isinstance(secret, str) and secret:
            text = text.replace(secret, "***")
    return text


def _secret(env: Mapping[str, str], var: str | None, what: str) -> str:
    if not var:
        raise KafkaConfigError(f"{what} must name the environment variable holding the password")
    value = env.get(var)
    if value is None:
        raise KafkaConfigError(f"environment variable {var} (from {what}) is not set")
    return value
