"""A writer-lease member in a process of its own, for tests that SIGSTOP it.

    python -m tests.kafka.lease_member BOOTSTRAP GROUP TOPIC LEASE_S MARGIN_S

Prints one JSON line per status, every 0.1 s and at once when resumed (SIGCONT): before
the lease thread's next poll could notice anything, so the line shows the local deadline.
Stops on SIGTERM, leaving the group.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from types import FrameType

from balancer.kafka.lease import KafkaWriterLease


def main() -> None:
    bootstrap, group, topic, lease_s, margin_s = sys.argv[1:6]
    lease = KafkaWriterLease(
        bootstrap_servers=bootstrap,
        group_id=group,
        topic=topic,
        identity=f"child:{threading.get_native_id()}",
        lease_s=float(lease_s),
        safety_margin_s=float(margin_s),
    )
    stop = threading.Event()

    def emit(event: str) -> None:
        status = lease.status()
        line = {"event": event, "t": time.monotonic(), **status.as_dict()}
        print(json.dumps(line), flush=True)

    def on_cont(_sig: int, _frame: FrameType | None) -> None:
        emit("resumed")

    signal.signal(signal.SIGCONT, on_cont)
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    lease.start()
    while not stop.wait(0.1):
        emit("status")
    lease.stop()


if __name__ == "__main__":
    main()
