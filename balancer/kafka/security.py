"""Kafka connection settings shared by the source, the dead-letter producer and the collector.

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


def _secret(env: Mapping[str, str], var: str | None, what: str) -> str:
    if not var:
        raise KafkaConfigError(f"{what} must name the environment variable holding the password")
    value = env.get(var)
    if value is None:
        raise KafkaConfigError(f"environment variable {var} (from {what}) is not set")
    return value
