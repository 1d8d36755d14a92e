"""The admin client's settings: one frozen value whose repr never shows a token."""

from __future__ import annotations

import dataclasses

import pytest

from balancer.pulsar import ClientSettings, RetryPolicy, TokenSource

TOKEN = "settings-secret-token-31337"


def test_the_repr_names_the_token_source_never_the_token() -> None:
    settings = ClientSettings(
        token=TokenSource(env_var="PULSAR_TOKEN"), environ={"PULSAR_TOKEN": TOKEN}
    )
    text = repr(settings)
    assert "PULSAR_TOKEN" in text  # where the token comes from is safe to show
    assert TOKEN not in text


def test_settings_are_frozen() -> None:
    settings = ClientSettings(retry=RetryPolicy(max_attempts=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_redirect_hops = 5  # type: ignore[misc]


def test_a_negative_hop_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_redirect_hops must be >= 0"):
        ClientSettings(max_redirect_hops=-1)
