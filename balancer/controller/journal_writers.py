"""Which process wrote a journal intent, and whether that process still runs.

Several processes may share one journal: `run` and an `apply` beside it (the review flow
keeps `run` in dry-run and applies plans with `apply`). An open intent is an action in
flight while its writer runs, and a crash's leftover only once the writer is gone; only
then may another process settle it. So each process that writes to the journal takes a
writer id and holds an exclusive `flock` on a file of its own next to the journal
(`<journal>.writers/<token>.lock`) for as long as it runs. The kernel drops the lock when
the process ends, however it ends (SIGKILL and OOM included), so "the lock can be taken"
proves the writer gone. SQLite's WAL mode already needs every process of a journal on one
host (its shared memory index), so a host-local lock is enough; it works across PID
namespaces (the balancer's pod and an apply Job on the same node).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import uuid
from pathlib import Path

log = logging.getLogger(__name__)


class WriterRegistry:
    """This process's writer id, held alive by its lock, and the liveness of the others."""

    def __init__(self, journal_path: Path | None, role: str) -> None:
        token = uuid.uuid4().hex[:16]
        # Readable in the journal and the audit log: who, where, which process, which run.
        self.writer_id = f"{role}@{socket.gethostname()}:{os.getpid()}/{token}"
        self._dir = None if journal_path is None else journal_path.with_name(
            f"{journal_path.name}.writers"
        )  # fmt: skip
        self._fd: int | None = None
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock_path(self.writer_id), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh token: never contended
            self._fd = fd

    def _lock_path(self, writer: str) -> Path:
        assert self._dir is not None
        token = writer.rsplit("/", 1)[-1]
        # A token is hex; anything else (a hand-edited journal) must not name another path.
        safe = "".join(c for c in token if c.isalnum()) or "none"
        return self._dir / f"{safe}.lock"

    def alive(self, writer: str | None) -> bool:
        """Whether `writer` may still be running. None (an intent from a journal written
        before writers were named) and a writer whose lock can be taken are gone; a writer
        whose lock cannot be checked counts as alive (never settle what may be in flight)."""
        if writer is None:
            return False
        if writer == self.writer_id:
            return True
        if self._dir is None:  # an in-memory journal: no other process can share it
            return False
        path = self._lock_path(writer)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False  # removed by whoever found it gone first
        except OSError as exc:
            log.warning("journal writer %s: lock %s not readable (%s): taken as alive",
                        writer, path, exc)  # fmt: skip
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as exc:
            log.warning("journal writer %s: lock %s not checked (%s): taken as alive",
                        writer, path, exc)  # fmt: skip
            return True
        else:
            path.unlink(missing_ok=True)  # gone for good: its lock file goes too
            return False
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release this writer's lock (the process ends or stops writing)."""
        if self._fd is not None:
            self._lock_path(self.writer_id).unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None
