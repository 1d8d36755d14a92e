"""The admin client built from the balancer's config: per-cluster token, TLS and timeouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from balancer.app.config import BalancerConfig
from balancer.app.pulsar_wiring import endpoint_from_config, peer_group_from_config
from balancer.pulsar import AuthConfigError, TokenSource
from balancer.pulsar.settings import ClientSettings

TOKEN = "wiring-secret-token"


def _config(tmp_path: Path) -> BalancerConfig:
    token_file = tmp_path / "east.token"
    token_file.write_text(TOKEN)
    return BalancerConfig.model_validate(
        {
            "clusters": [
                {
                    "name": "east",
                    "admin_url": "http://127.0.0.1:8080/",
                    "token_file": str(token_file),
                    "connect_timeout_s": 2,
                    "request_timeout_s": 9,
                },
                {"name": "west", "admin_url": "https://west.example:8443", "token_env": "W_TOK"},
                {"name": "lab", "admin_url": "https://lab.example", "tls_verify": False},
            ]
        }
    )


def test_each_cluster_keeps_its_own_settings(tmp_path: Path) -> None:
    config = _config(tmp_path)
    east, west, lab = (endpoint_from_config(c) for c in config.clusters)
    assert east.admin_url == "http://127.0.0.1:8080"
    assert east.token == TokenSource(file=tmp_path / "east.token")
    assert east.timeouts is not None
    assert (east.timeouts.connect_s, east.timeouts.read_s, east.timeouts.write_s) == (2, 9, 9)
    assert west.token == TokenSource(env_var="W_TOK")
    assert west.tls is not None and west.tls.verify is True
    assert lab.token is None and lab.tls is not None and lab.tls.verify is False


def test_the_peer_group_reads_every_token_at_start(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with peer_group_from_config(config, ClientSettings(environ={"W_TOK": "west-token"})) as group:
        assert list(group.clusters) == ["east", "west", "lab"]
        assert group.entry_cluster == "east"
        assert TOKEN not in repr(group) and "west-token" not in repr(group)
    with pytest.raises(AuthConfigError, match="W_TOK is not set"):
        peer_group_from_config(config, ClientSettings(environ={}))
