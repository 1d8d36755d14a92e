"""The single-writer lease on Kafka's group protocol, as Schema Registry and Kafka Connect
elect their leader: the balancers of one peer group join one consumer group on a
one-partition topic, and the member assigned partition 0 holds the lease.

- `LeaseAssignor`, the group's assignment strategy, is sticky: the member that holds the
  lease keeps it across rebalances (a standby that joins or restarts does not take it), and
  tells every member who holds it. Two members that both claim it (which the protocol should
  never produce) both lose it for a round. Cooperative (KIP-429): the holder is not asked to
  give it up when another member joins.
- `KafkaWriterLease` runs the member on a thread of its own and keeps the local deadline of
  `balancer.core.lease`: valid until the send time of the last round trip (heartbeat or
  SyncGroup) that Kafka answered without error, plus the session timeout minus a margin, and
  no later than the start of the lease thread's last poll plus the rebalance timeout minus
  the margin (kafka-python leaves the group by itself when its poll loop stalls that long).

The send times come from kafka-python 3's group coordinator (its response handlers are given
them); `start()` refuses a kafka-python without them rather than hold an unfenced lease.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor, RebalanceProtocol
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from balancer.core.lease import LeaseState, LeaseStatus
from balancer.kafka.clients import close_consumer
from balancer.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

ASSIGNOR_NAME = "pulsar-balancer-writer-lease"
_VERSION = 1  # ConsumerProtocol v1: cooperative members
# The coordinator's handlers that receive a request's send time with a successful answer.
_CONFIRMING_HANDLERS = ("_handle_heartbeat_response", "_process_sync_group_response")


class LeaseUnsupportedError(RuntimeError):
    """The installed kafka-python does not expose what the lease's fencing needs."""


def check_fencing_supported() -> None:
    """Raise LeaseUnsupportedError unless kafka-python's coordinator hands out send times."""
    import inspect

    from kafka.coordinator.consumer import ConsumerCoordinator

    for name in _CONFIRMING_HANDLERS:
        handler = getattr(ConsumerCoordinator, name, None)
        params = list(inspect.signature(handler).parameters) if callable(handler) else []
        if params[1:] != ["response", "send_time"]:
            raise LeaseUnsupportedError(
                f"kafka-python's ConsumerCoordinator.{name} does not take (response, send_time): "
                "the writer lease's fencing needs kafka-python 3"
            )


def _decode(data: bytes | None) -> dict[str, Any]:
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _encode(value: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(value), sort_keys=True).encode()


def choose_holder(claims: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The member to hold the lease, from each member's claim (member id -> its metadata).

    The one member that claims it keeps it; with no claim, the first member by id takes it;
    with several claims, nobody this round: each revokes, and the next round picks one.

    A member that `yields` (`drain --wait` draining by itself, its liveness probe) holds the
    lease only while no other kind of member (a balancer) is in the group: when a balancer
    joins, the yielding holder gets nobody's lease this round (it revokes, stops acting, and
    kafka-python rejoins at once, KIP-429), and the next round, with no claim, gives the
    lease to the first member that does not yield.
    """
    claiming = sorted(m for m, claim in claims.items() if claim.get("holding") is True)
    steady = sorted(m for m, claim in claims.items() if claim.get("yields") is not True)
    if len(claiming) == 1:
        holder = claiming[0]
        if steady and claims[holder].get("yields") is True:
            log.info("writer lease: %s yields it to %s (nobody holds it this round)",
                     claims[holder].get("identity"), claims[steady[0]].get("identity"))  # fmt: skip
            return None
        return holder
    if claiming:
        log.warning("several members claim the writer lease (%s): nobody holds it this round",
                    ", ".join(str(claims[m].get("identity")) for m in claiming))  # fmt: skip
        return None
    if steady:
        return steady[0]
    return min(claims) if claims else None


class LeaseAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Assigns partition 0 of the lease topic to one member; tells everyone who has it."""

    name = ASSIGNOR_NAME

    def __init__(
        self,
        *,
        identity: str,
        holding: Callable[[], bool],
        on_holder: Callable[[str | None], None],
        yields: bool = False,
    ) -> None:
        self._identity = identity
        self._holding = holding
        self._on_holder = on_holder
        self._yields = yields

    def supported_protocols(self) -> list[RebalanceProtocol]:
        return [RebalanceProtocol.COOPERATIVE]

    def metadata(self, topics: Any) -> Any:
        claim = {"identity": self._identity, "holding": self._holding(), "yields": self._yields}
        return ConsumerProtocolSubscription(
            version=_VERSION, topics=sorted(topics), user_data=_encode(claim), owned_partitions=[]
        )

    def assign(self, cluster: Any, members: Any) -> dict[str, Any]:
        claims = {m.member_id: _decode(m.metadata.user_data) for m in members}
        topics = sorted({t for m in members for t in m.metadata.topics})
        holder = choose_holder(claims)
        identity = claims[holder].get("identity") if holder is not None else None
        told = _encode({"holder": identity})
        return {
            member_id: ConsumerProtocolAssignment(
                version=_VERSION,
                assigned_partitions=[(t, [0]) for t in topics] if member_id == holder else [],
                user_data=told,
            )
            for member_id in claims
        }

    def on_assignment(self, assignment: Any, generation: Any = None) -> None:
        holder = _decode(assignment.user_data).get("holder")
        self._on_holder(holder if isinstance(holder, str) else None)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, lease: KafkaWriterLease) -> None:
        self._lease = lease

    def on_partitions_assigned(self, assigned: Any) -> None:
        if self._lease.partition in assigned:
            self._lease._assigned()

    def on_partitions_revoked(self, revoked: Any) -> None:
        if self._lease.partition in revoked:
            self._lease._revoked("the group moved the writer lease to another member")

    def on_partitions_lost(self, lost: Any) -> None:
        if self._lease.partition in lost:
            self._lease._revoked("this member left the group (session expired or Kafka lost)")


class KafkaWriterLease:
    """A member of the peer group's lease group; `status()` says whether this process may act.

    `start()` returns at once (the member joins on its own thread, retrying while Kafka is
    away); `stop()` gives the lease up at once and leaves the group within `close_timeout_s`.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        topic: str,
        identity: str,
        lease_s: float,
        safety_margin_s: float,
        client_kwargs: Mapping[str, Any] | None = None,
        # Long polls: kafka-python 3.0 drops a join that completes between two polls and
        # joins again (on tansu another half session timeout); a short poll makes that likelier.
        poll_interval_s: float = 2.0,
        close_timeout_s: float = 5.0,
        yields: bool = False,
    ) -> None:
        """`yields`: this member gives the lease up to any member that does not yield
        (`choose_holder`): `drain --wait` yields to a balancer that starts."""
        if not 0 <= safety_margin_s < lease_s:
            raise ValueError("safety_margin_s must be >= 0 and below lease_s")
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.topic = topic
        self.identity = identity
        self.lease_s = lease_s
        self.partition = TopicPartition(topic, 0)
        self.yields = yields
        self._client_kwargs = dict(client_kwargs or {})
        self._poll_interval_s = poll_interval_s
        self._close_timeout_s = close_timeout_s
        # kafka-python stamps its requests with time.monotonic: the deadline uses the same.
        self._clock = time.monotonic
        self._state = LeaseState(identity=identity, validity_s=lease_s - safety_margin_s)
        self._lock = threading.Lock()
        self._confirmed_sent_s = float("-inf")  # latest successful round trip's send time
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_logged: tuple[bool, str | None] = (False, None)

    # -- what the controller, /readyz and the metrics read ----------------------------------

    def status(self) -> LeaseStatus:
        with self._lock:
            return self._state.status(self._clock())

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> KafkaWriterLease:
        """Join in the background; raises LeaseUnsupportedError at once if it cannot fence."""
        check_fencing_supported()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="writer-lease", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Give the lease up now (no action starts after this), then leave the group."""
        self._stopping.set()
        with self._lock:
            self._state.revoke("stopping")
        if self._thread is not None:
            self._thread.join(self._poll_interval_s + self._close_timeout_s + 2.0)
            if self._thread.is_alive():
                log.warning("writer lease thread did not end in time; the session expires it")

    # -- the member's thread ---------------------------------------------------------------------

    def _run(self) -> None:
        consumer: KafkaConsumer | None = None
        try:
            while not self._stopping.is_set():
                if consumer is None:
                    consumer = self._connect()
                    if consumer is None:
                        self._stopping.wait(2.0)
                        continue
                self._poll_once(consumer)
        finally:
            with self._lock:
                self._state.revoke("stopping")
            if consumer is not None:
                try:
                    close_consumer(consumer, self._close_timeout_s)  # LeaveGroup: quick takeover
                except Exception:
                    log.exception("writer lease: leaving the group failed")

    def _connect(self) -> KafkaConsumer | None:
        try:
            ensure_topics(
                self.bootstrap_servers, {self.topic: 1}, client_kwargs=self._client_kwargs
            )
            consumer = self._consumer()
        except Exception as exc:  # Kafka away: retried; the lease stays unheld meanwhile
            with self._lock:
                self._state.revoke(f"Kafka not reachable ({type(exc).__name__})")
            log.warning("writer lease: cannot join group %s yet (%s)", self.group_id, exc)
            return None
        log.info(
            "writer lease: joining group %s on topic %s as %s",
            self.group_id, self.topic, self.identity,
        )  # fmt: skip
        return consumer

    def _consumer(self) -> KafkaConsumer:
        session_ms = round(self.lease_s * 1000)
        assignor = LeaseAssignor(
            identity=self.identity,
            holding=self._holding,
            on_holder=self._observe_holder,
            yields=self.yields,
        )
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers.split(","),
            group_id=self.group_id,
            client_id=f"pulsar-balancer-lease-{self.identity}",
            enable_auto_commit=False,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, session_ms // 10),
            # The rebalance timeout, and how long kafka-python lets its poll loop stall before
            # it leaves the group. At least the session timeout: the deadline follows the
            # session, and the poll loop's own bound (`_poll_once`) stays far off.
            max_poll_interval_ms=2 * session_ms,
            partition_assignment_strategy=[assignor],
            **self._client_kwargs,
        )
        self._hook_confirmations(consumer)
        consumer.subscribe([self.topic], listener=_Listener(self))
        return consumer

    def _hook_confirmations(self, consumer: KafkaConsumer) -> None:
        """Note the send time of every heartbeat and SyncGroup that Kafka answered without error.

        kafka-python 3 hands these handlers `(response, send_time)` and they raise on any
        error code, so returning normally means Kafka confirmed the membership.
        """
        coordinator = consumer._coordinator
        for name in _CONFIRMING_HANDLERS:
            setattr(coordinator, name, self._confirming(getattr(coordinator, name)))

    def _confirming(self, handler: Callable[[Any, float], Any]) -> Callable[[Any, float], Any]:
        def confirmed(response: Any, send_time: float) -> Any:
            result = handler(response, send_time)  # raises unless Kafka answered "no error"
            with self._lock:
                self._confirmed_sent_s = max(self._confirmed_sent_s, send_time)
            return result

        return confirmed

    def _poll_once(self, consumer: KafkaConsumer) -> None:
        started_s = self._clock()
        try:
            consumer.poll(timeout_ms=round(self._poll_interval_s * 1000))
            assignment = consumer.assignment()
        except Exception as exc:  # never let the thread die: the lease lapses, it rejoins
            with self._lock:
                self._state.revoke(f"Kafka group error ({type(exc).__name__})")
            log.warning("writer lease: poll failed (%s); retrying", exc)
            self._stopping.wait(1.0)
            return
        with self._lock:
            if self._stopping.is_set():
                return
            if self.partition in assignment:
                self._state.assign()
                # Nor later than this poll's start plus the rebalance timeout less the session:
                # a stalled poll loop lets the lease lapse before kafka-python leaves the group.
                self._state.confirm(min(self._confirmed_sent_s, started_s + self.lease_s))
            elif self._state.assigned:
                self._state.revoke("the group moved the writer lease to another member")
            status = self._state.status(self._clock())
        self._log_change(status)

    def _log_change(self, status: LeaseStatus) -> None:
        now = (status.held, status.holder)
        was_held = self._last_logged[0]
        if now == self._last_logged:
            return
        self._last_logged = now
        if status.held:
            log.info("writer lease acquired (group %s): this balancer acts", self.group_id)
        elif was_held:
            log.warning("writer lease lost (group %s): %s", self.group_id, status.detail)
        else:
            log.info("writer lease (group %s): %s", self.group_id, status.detail)

    # -- callbacks from kafka-python (its network thread, inside a poll) ------------------------

    def _holding(self) -> bool:
        with self._lock:
            return self._state.assigned and not self._stopping.is_set()

    def _observe_holder(self, holder: str | None) -> None:
        with self._lock:
            self._state.observe_holder(holder)

    def _assigned(self) -> None:
        with self._lock:
            if not self._stopping.is_set():
                self._state.assign()

    def _revoked(self, reason: str) -> None:
        with self._lock:
            self._state.revoke(reason)
