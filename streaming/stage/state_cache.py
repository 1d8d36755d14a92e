"""Local copies of the window stage's list states, so a read can skip the state server.

Reading a list state from Python costs the JVM more than anything else in a steady batch:
the transformWithState state server pickles every row for the Python worker, a binary
value a byte at a time (Pyrolite's protocol 2 writes a `byte[]` as a latin-1 string), and
the worker unpickles it (docs/decisions.md#list-states-read-from-a-local-copy). Yet most of
what a bucket reads is what it wrote itself a batch before: a pane's packs (appended, then
read by the close of each window holding the pane) and its known topics (read and put back
at every close).

So each list that `CachedList` wraps carries a *token* in a value state of its own: a
random number written with every change of the list (put, append, clear), in the same task
and so in the same state version. Beside it, the executor's local dir holds a copy of the
list as it was right after the change that wrote that token, in a file named by the route,
the list and the token. A read takes the copy only when the file named by the state's
current token is there and whole; otherwise it reads the state and leaves a copy for the
next read. The state stays the truth:
- a token names one content for good: only the change that drew it writes it and its copy;
- a retried or failed task attempt draws new tokens, and the state it resumes from holds
  the old ones (a copy of those is either still there and right, or gone: a state read);
- a restart starts a new application, whose local dirs are new: no copies at all;
- a copy that cannot be written or read (disk full, a torn file) is a state read, never
  an error.
Each (route, list) keeps one file: writing a copy removes the others (another attempt's
included: that only costs it a state read). The copies take about the disk of the open
windows' state once more.
"""

from __future__ import annotations

import os
import secrets
import struct
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

# A row of a list state the stage keeps: its fields are ints (LongType) and bytes (BinaryType).
Row = tuple[int | bytes, ...]

TOKEN_SCHEMA: Final = StructType([StructField("token", LongType())])
# Under the first of the executor's local dirs (Spark's runner gives them to its Python
# workers): removed with the application's other local files when it stops.
CACHE_DIR_NAME: Final = "pulsar-balancer-state"
# A file of `STATS_ENV`'s value, if set, gets a line per read and write of a copy (bench/
# diagnostics: the hit rate, and whether a bucket's task stays on one Python worker).
STATS_ENV: Final = "PULSAR_BALANCER_STATE_CACHE_LOG"

_MAGIC: Final = b"PBL1"
_HEADER: Final = struct.Struct("<4sIQ")  # magic, CRC-32 of the rows, row count
_LONG: Final = struct.Struct("<q")
_LENGTH: Final = struct.Struct("<Q")


class RowCodec:
    """Rows of a list state's schema (LongType and BinaryType fields) to bytes and back."""

    def __init__(self, schema: StructType) -> None:
        kinds = []
        for field in schema.fields:
            if not isinstance(field.dataType, LongType | BinaryType):
                raise TypeError(f"a cached list holds longs and binaries, not {field.dataType}")
            kinds.append(isinstance(field.dataType, BinaryType))
        self._binary = tuple(kinds)

    def normalize(self, row: Sequence[Any]) -> Row:
        """A row as the state server gives it (bytearray payloads) as the stage keeps it."""
        return tuple(
            bytes(v) if binary else int(v) for v, binary in zip(row, self._binary, strict=True)
        )

    def dump(self, rows: Sequence[Row]) -> list[bytes]:
        """The file's parts, header first (written as they are: no copy of the payloads)."""
        parts: list[bytes] = []
        for row in rows:
            for value, binary in zip(row, self._binary, strict=True):
                if binary:
                    assert isinstance(value, bytes)
                    parts += (_LENGTH.pack(len(value)), value)
                else:
                    parts.append(_LONG.pack(value))
        crc = 0
        for part in parts:
            crc = zlib.crc32(part, crc)
        return [_HEADER.pack(_MAGIC, crc, len(rows)), *parts]

    def load(self, data: bytes) -> list[Row] | None:
        """The rows `dump` wrote, or None if `data` is not such a file, whole."""
        if len(data) < _HEADER.size:
            return None
        magic, crc, count = _HEADER.unpack_from(data)
        view = memoryview(data)[_HEADER.size :]
        if magic != _MAGIC or zlib.crc32(view) != crc:
            return None
        rows: list[Row] = []
        at = 0
        try:
            for _ in range(count):
                row: list[int | bytes] = []
                for binary in self._binary:
                    if binary:
                        (length,) = _LENGTH.unpack_from(view, at)
                        at += _LENGTH.size
                        if at + length > len(view):
                            return None
                        row.append(bytes(view[at : at + length]))
                        at += length
                    else:
                        row.append(_LONG.unpack_from(view, at)[0])
                        at += _LONG.size
                rows.append(tuple(row))
        except struct.error:
            return None
        return rows if at == len(view) else None


class LocalCopies:
    """The copies' directory: one file per (route, list), named with its token."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._stats = os.environ.get(STATS_ENV)

    @classmethod
    def of_executor(cls) -> LocalCopies | None:
        """In the executor's first local dir; None outside a Spark Python worker."""
        dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
        first = dirs.split(",")[0].strip()
        return cls(Path(first) / CACHE_DIR_NAME) if first else None

    def read(self, route: int, name: str, token: int, codec: RowCodec) -> list[Row] | None:
        try:
            data = self._path(route, name, token).read_bytes()
        except OSError:
            rows = None
        else:
            rows = codec.load(data)
        self._note("hit" if rows is not None else "miss", route, name)
        return rows

    def write(
        self, route: int, name: str, token: int, rows: Sequence[Row], codec: RowCodec
    ) -> None:
        """Leaves `rows` as the copy of `name` with `token`, the only one of (route, name)."""
        path = self._path(route, name, token)
        temporary = self.directory / f".{route}.{name}.{uuid.uuid4().hex}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with temporary.open("wb") as file:
                file.writelines(codec.dump(rows))
            os.replace(temporary, path)  # whole or absent: a reader never sees half of it
        except OSError:
            self.forget(route, name)  # a half-written file, and the copy this one replaced
            return
        self.forget(route, name, keep=path)
        self._note("write", route, name)

    def forget(self, route: int, name: str, *, keep: Path | None = None) -> None:
        """Removes the copies of (route, name), but `keep`, and any half-written file."""
        try:
            for pattern in (f"{route}.{name}.*", f".{route}.{name}.*"):
                for old in self.directory.glob(pattern):
                    if old != keep:
                        old.unlink(missing_ok=True)
        except OSError:
            pass  # a copy left over is never wrong (its token names its content), only disk

    def _path(self, route: int, name: str, token: int) -> Path:
        return self.directory / f"{route}.{name}.{token & (2**64 - 1):016x}"

    def _note(self, what: str, route: int, name: str) -> None:
        if self._stats:
            with open(self._stats, "a", encoding="utf-8") as log:
                log.write(f"{os.getpid()} {route} {name} {what}\n")


class CachedList:
    """A list state of the stage with its token (`<name>_token`) and its local copies."""

    def __init__(
        self,
        handle: StatefulProcessorHandle,
        name: str,
        schema: StructType,
        copies: LocalCopies | None,
    ) -> None:
        self.name = name
        self.state = handle.getListState(name, schema)
        self.token = handle.getValueState(f"{name}_token", TOKEN_SCHEMA)
        self.codec = RowCodec(schema)
        self.copies = copies

    def get(self, route: int) -> list[Row]:
        """The list's rows (none when absent), from the copy of its current token if there."""
        token = self._current()
        if token is not None and self.copies is not None:
            rows = self.copies.read(route, self.name, token, self.codec)
            if rows is not None:
                return rows
        rows = [self.codec.normalize(row) for row in self.state.get()]
        if self.copies is not None:
            if token is None:  # a list from before tokens: name this content now
                token = self._draw()
            self.copies.write(route, self.name, token, rows, self.codec)
        return rows

    def put(self, route: int, rows: Sequence[Row]) -> None:
        """Replaces the list with `rows` (none: clears it)."""
        if rows:
            self.state.put(list(rows))
        else:
            self.state.clear()
        self._changed(route, rows)

    def append(self, route: int, rows: Sequence[Row]) -> None:
        """Appends `rows`; the copy follows when the one before was current."""
        before: list[Row] | None = None
        token = self._current()
        if self.copies is not None:
            if token is not None:
                before = self.copies.read(route, self.name, token, self.codec)
            elif not self.state.exists():  # a new list (a list gets its token for good)
                before = []
        self.state.appendList(list(rows))
        self._changed(route, None if before is None else [*before, *rows])

    def _changed(self, route: int, rows: Sequence[Row] | None) -> None:
        """A new token for the list's new content: `rows`, or None when not known here."""
        token = self._draw()
        if self.copies is None:
            return
        if rows is None:
            self.copies.forget(route, self.name)
        else:
            self.copies.write(route, self.name, token, rows, self.codec)

    def _current(self) -> int | None:
        value = self.token.get()
        return None if value is None else int(value[0])

    def _draw(self) -> int:
        token = secrets.randbits(64) - 2**63  # a LongType
        self.token.update((token,))
        return token


__all__ = ["STATS_ENV", "TOKEN_SCHEMA", "CachedList", "LocalCopies", "RowCodec"]
