"""`with` for what we start: leaving the block stops it, whatever happened inside."""

from __future__ import annotations

from typing import Self


class StopsOnExit:
    """A base for started things (servers, brokers, peer groups) that have a `stop()`."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
