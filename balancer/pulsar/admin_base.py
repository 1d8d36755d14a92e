"""The admin client's plumbing: the transport, routing views, request counts, decoding,
and how names become URL paths. `cluster_reads` and `client` build the calls on it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx

from balancer.core.bundles import BundleRange, InvalidBundle
from balancer.core.topics import TopicName
from balancer.pulsar.models import ResponseShapeError
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.transport import AdminTransport, Call, RequestKey

_T = TypeVar("_T")
_NAME = re.compile(r"^[-=:.\w]+$")  # Pulsar's rule for tenant, namespace and cluster names
_SPECIAL_BUNDLES = ("LARGEST", "HOT")  # Pulsar accepts these in place of a range on split

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


def enc(part: str) -> str:
    """One path segment, percent-encoded (a `/` inside a name must not become a separator)."""
    return quote(part, safe="")


def valid_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"invalid {what} {value!r} (allowed: letters, digits, -=:._)")
    return value


def split_namespace(namespace: str) -> tuple[str, str]:
    if not isinstance(namespace, str) or namespace.count("/") != 1:
        raise ValueError(f"namespace must be 'tenant/namespace', got {namespace!r}")
    tenant, ns = namespace.split("/")
    return valid_name(tenant, "tenant"), valid_name(ns, "namespace")


def bundle_text(bundle: BundleRange | str, *, allow_special: bool = False) -> str:
    if isinstance(bundle, BundleRange):
        return str(bundle)
    if allow_special and bundle in _SPECIAL_BUNDLES:
        return bundle
    try:
        return str(BundleRange.parse(bundle))
    except InvalidBundle as exc:
        raise ValueError(str(exc)) from None


def ns_path(namespace: str, suffix: str = "") -> tuple[str, str]:
    tenant, ns = split_namespace(namespace)
    return f"/admin/v2/namespaces/{enc(tenant)}/{enc(ns)}{suffix}", NS


def topic_path(topic: TopicName, suffix: str) -> tuple[str, str]:
    path = (
        f"/admin/v2/{topic.domain.value}/{enc(topic.tenant)}/{enc(topic.namespace)}/"
        f"{enc(topic.local_name)}{suffix}"
    )
    return path, f"{TOPIC}{suffix}"


class AdminBase:
    """The transport of a peer group's admin client and what every call shares: routing
    views, request counts, token problems, decoding an answer into a typed error."""

    def __init__(
        self,
        clusters: Mapping[str, ClusterEndpoint] | Iterable[ClusterEndpoint],
        settings: ClientSettings | None = None,
    ) -> None:
        if not isinstance(clusters, Mapping):
            endpoints = list(clusters)
            clusters = {e.name: e for e in endpoints}
            if len(clusters) != len(endpoints):
                raise ValueError("cluster names in a peer group must be unique")
        self._t = AdminTransport(clusters, settings)

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._t!r})"

    # -- routing and counting ---------------------------------------------------------------

    @property
    def clusters(self) -> Mapping[str, ClusterEndpoint]:
        return self._t.router.clusters

    @property
    def entry_cluster(self) -> str:
        return self._t.router.entry_cluster

    def owner_of(self, namespace: str) -> str | None:
        """The cluster last seen serving `namespace`, or None if not learnt yet."""
        return self._t.router.owner_of(namespace)

    def forget_owner(self, namespace: str) -> None:
        self._t.router.forget_owner(namespace)

    def request_counts(self) -> dict[RequestKey, int]:
        """Attempts sent, per (cluster, method, path template)."""
        return self._t.request_counts()

    def request_count(self, **filters: str | None) -> int:
        """Attempts sent so far matching every filter given (`AdminTransport.request_count`)."""
        return self._t.request_count(**filters)

    def reset_request_counts(self) -> None:
        self._t.reset_request_counts()

    def token_problems(self) -> dict[str, str]:
        """Cluster -> why its token file cannot be used now: deleted, unreadable, empty (a
        sentence without the token; logged once as a WARNING). Empty when every token is
        fine. The last good token is sent meanwhile."""
        return self._t.token_problems()

    # -- plumbing ---------------------------------------------------------------------------

    def _parse(self, call: Call, parse: Callable[[Any], _T]) -> _T:
        return self._decode(call, self._t.send(call), parse)

    def _decode(self, call: Call, response: httpx.Response, parse: Callable[[Any], _T]) -> _T:
        try:
            body = response.json()
            return parse(body)
        except (ValueError, KeyError, TypeError) as exc:
            # ResponseShapeError, InvalidBundle and JSON errors are all ValueErrors.
            detail = (
                str(exc)
                if isinstance(exc, ResponseShapeError | InvalidBundle)
                else (f"{type(exc).__name__}: {exc}")
            )
            raise self._t.invalid_response(call, response, detail) from None

    def _cluster_or_entry(self, cluster: str | None) -> str:
        return self.entry_cluster if cluster is None else cluster
