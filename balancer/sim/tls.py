"""TLS for simulated brokers that also listen on a `webServicePortTls` (issue 41).

A real broker with `webServicePort=8080` and `webServicePortTls=8443` keeps the plain port
in its id (`ModularLoadManagerImpl`/`PulsarService`: the TLS port only when no plain port
is configured) and publishes both URLs (`webServiceUrl`, `webServiceUrlTls`). The simulator's
TLS listener serves a self-signed certificate made with the `openssl` command, for
127.0.0.1; clients trust it as their CA bundle (`RunningPeerGroup.tls_ca_file`).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path


class TlsUnavailableError(RuntimeError):
    """No `openssl` command to make the simulator's certificate with."""


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (valid one day) in `directory`: (cert, key)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsUnavailableError("the simulator's TLS brokers need the openssl command")
    cert, key = directory / "sim-broker.pem", directory / "sim-broker.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The TLS listener's context (the handshake runs in each request's thread)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return context
