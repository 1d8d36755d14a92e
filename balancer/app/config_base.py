"""What every section of the configuration shares: a frozen model that refuses unknown keys,
and the check that a secret is named by an environment variable, never given inline."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


def env_name(value: str | None) -> str | None:
    """A field validator: `value` must be the NAME of an environment variable."""
    if value is not None and not _ENV_NAME.match(value):
        # Never echo the value: it may be the secret itself pasted by mistake.
        raise ValueError("must be the NAME of an environment variable (letters, digits, _)")
    return value
