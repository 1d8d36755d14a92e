"""The drain marks as `plan` and `apply` read them: bounded, read-only, never in the way.

`plan` shows the brokers marked draining and a roll in progress (it plans them as `run`
would: a drain by the roll's order); `apply` refuses a
move whose destination is marked draining at send time. Neither may hang on Kafka: a config
without a `kafka` section, or a Kafka that does not answer within `timeout_s`, gives
"marks unknown" (said in the output), and the command goes on without them. The read runs on
a daemon thread joined with a deadline, so even a client that blocks past its own timeouts
(a DNS lookup, a bootstrap that never connects) costs at most `timeout_s` plus a second.
Neither command creates the marks topic (`create_topic=False`) nor writes a mark.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from balancer.app.config import BalancerConfig
from balancer.app.stream_settings import kafka_security
from balancer.core.drain_marks import DrainMark, draining_brokers
from balancer.core.rollout_record import Rollout
from balancer.kafka.drain_marks import KafkaDrainMarks

# `plan` waits at most this long for the marks (plus a second to let the thread go).
MARKS_READ_TIMEOUT_S = 3.0
# `apply` reads them again at most this often while it sends (a long, rate-limited apply).
APPLY_REFRESH_S = 10.0


@dataclass(frozen=True, slots=True)
class MarksRead:
    """The marks read (None: unknown) and, when unknown, why."""

    marks: tuple[DrainMark, ...] | None
    unknown_because: str | None = None
    # cluster -> its rollout record (`roll start`), of the clusters of the config
    rollouts: Mapping[str, Rollout] = field(default_factory=dict)

    def rollout_order(self, cluster: str) -> tuple[str, ...]:
        """The restart order of the cluster's roll in progress, else () (as `run` reads it:
        `DrainMarksView.rollout_order`)."""
        rollout = self.rollouts.get(cluster)
        return rollout.order if rollout is not None and rollout.rolling else ()

    def draining(self, cluster: str) -> frozenset[str]:
        """Brokers of `cluster` marked draining (none when the marks are unknown)."""
        return draining_brokers(self.marks or (), cluster)

    @property
    def note(self) -> str:
        if self.marks is None:
            return f"Drain marks: unknown ({self.unknown_because})"
        return "Drain marks: read"


def kafka_configured(config: BalancerConfig) -> bool:
    """Whether the config names a Kafka (its `kafka` section): the default bootstrap
    (127.0.0.1:9092) of a config without one is not asked."""
    return "kafka" in config.model_fields_set


def _store(config: BalancerConfig, timeout_s: float) -> KafkaDrainMarks:
    return KafkaDrainMarks(
        bootstrap_servers=",".join(config.kafka.bootstrap_servers),
        topic=config.kafka.drain_marks_topic,
        client_kwargs=kafka_security(config).client_kwargs(),
        timeout_s=timeout_s,
        create_topic=False,
    )


def read_marks(config: BalancerConfig, *, timeout_s: float = MARKS_READ_TIMEOUT_S) -> MarksRead:
    """Every mark on the config's topic, read to its end within `timeout_s`, or unknown."""
    if not kafka_configured(config):
        return MarksRead(None, "the config has no kafka section")
    got: list[MarksRead] = []

    def read() -> None:
        store = _store(config, timeout_s)
        try:
            deadline = time.monotonic() + timeout_s
            while not store.refresh():  # a big topic is read over a few calls
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic not read to its end in {timeout_s:g} s")
            rollouts = {c.name: store.rollout(c.name) for c in config.clusters}
            got.append(MarksRead(store.marks(), rollouts={c: r for c, r in rollouts.items() if r}))
        except Exception as exc:  # Kafka away or refusing: the marks are unknown
            got.append(MarksRead(None, f"{type(exc).__name__}: {exc}"))
        finally:
            with contextlib.suppress(Exception):  # closing a client that never connected
                store.close()

    thread = threading.Thread(target=read, name="drain-marks-read", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    if not got:
        servers = ",".join(config.kafka.bootstrap_servers)
        return MarksRead(None, f"Kafka {servers} did not answer in {timeout_s:g} s")
    return got[0]


class ApplyMarks:
    """`apply`'s `draining_of`: the marks read before the first action, read again (bounded)
    at most every `refresh_s`; a failed read keeps the marks read last."""

    def __init__(
        self,
        config: BalancerConfig,
        *,
        refresh_s: float = APPLY_REFRESH_S,
        timeout_s: float = MARKS_READ_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._refresh_s = refresh_s
        self._timeout_s = timeout_s
        self._monotonic = monotonic
        self.last = read_marks(config, timeout_s=timeout_s)
        self._known = self.last
        self._read_at = monotonic()

    def draining(self, cluster: str) -> frozenset[str]:
        if self._monotonic() - self._read_at >= self._refresh_s:
            self._read_at = self._monotonic()
            self.last = read_marks(self._config, timeout_s=self._timeout_s)
            if self.last.marks is not None:
                self._known = self.last
        return self._known.draining(cluster)
