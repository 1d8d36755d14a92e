"""Bundle layouts for the stream, read from each namespace's admin API and kept fresh.

The stream maps every topic to its bundle with these layouts, so they must follow splits:
a layout is re-read after `refresh_s`, and at once after the controller acted on the
namespace (`invalidate`). A namespace whose layout cannot be read keeps its last known
layout; one never read falls back to Pulsar's initial 4-bundle layout, so a single failing
cluster never stops the stream (its bundles then show in the snapshot under that layout
until the real one is known).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from balancer.bundles import NamespaceBundles

log = logging.getLogger(__name__)

DEFAULT_INITIAL_BUNDLES = 4


class BundlesReader(Protocol):
    def get_bundles(self, namespace: str) -> NamespaceBundles: ...


@dataclass
class _Entry:
    layout: NamespaceBundles
    read_at_s: float
    known: bool  # read from Pulsar (False: the fallback layout)


class AdminLayouts:
    """A `LayoutProvider` (see streaming.handler) backed by `GET .../bundles`."""

    def __init__(
        self,
        admin: BundlesReader,
        *,
        refresh_s: float = 60.0,
        retry_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin = admin
        self._refresh_s = refresh_s
        self._retry_s = retry_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self.read_failures = 0

    def layout(self, cluster: str, namespace: str) -> NamespaceBundles:
        # A namespace lives in one cluster of the peer group; the client routes to it.
        now = self._monotonic()
        with self._lock:
            entry = self._entries.get(namespace)
        if entry is not None:
            age_s = now - entry.read_at_s
            if age_s < (self._refresh_s if entry.known else self._retry_s):
                return entry.layout
        try:
            fresh = self._admin.get_bundles(namespace)
        except Exception as exc:  # any failure: keep serving the last layout we had
            self.read_failures += 1
            log.warning("bundles of %s not readable (%s); keeping the last known layout",
                        namespace, type(exc).__name__)
            fallback = entry.layout if entry else NamespaceBundles.initial(
                namespace, DEFAULT_INITIAL_BUNDLES
            )
            with self._lock:
                self._entries[namespace] = _Entry(fallback, now, entry.known if entry else False)
            return fallback
        with self._lock:
            self._entries[namespace] = _Entry(fresh, now, True)
        return fresh

    def known_topics(self, cluster: str, namespace: str) -> int | None:
        # The stream counts the topics it has seen per bundle; no extra listing call here.
        return None

    def invalidate(self, namespace: str) -> None:
        """Forget a namespace's layout (after a split) so the next lookup re-reads it."""
        with self._lock:
            self._entries.pop(namespace, None)

    def cached(self) -> dict[str, NamespaceBundles]:
        with self._lock:
            return {ns: e.layout for ns, e in self._entries.items()}
