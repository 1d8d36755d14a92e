"""The simulated admin API's request and response values, shared by the route modules."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from balancer.sim.state import SimError

if TYPE_CHECKING:
    from balancer.sim.model import SimModel

_SEG = r"([^/]+)"
MAX_BODY_BYTES = 16 * 1024 * 1024  # an admin request body is a few boundaries or a message id


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    cluster: str
    broker: int
    params: tuple[str, ...] = ()
    tls: bool = False  # asked on the broker's TLS port (PulsarWebResource.isRequestHttps)

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() == "true"

    def json_body(self) -> Any:
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SimError(400, f"Request body is not valid JSON: {exc}") from None


@dataclass
class Response:
    status: int
    body: object = None  # JSON-serialisable, RawJson, or str for text/plain
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RawJson:
    """A body already serialised to JSON bytes."""

    payload: bytes


Handler = Callable[["SimModel", Request], Response]
