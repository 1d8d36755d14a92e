"""The window stage's local copies of its list states (`streaming.stage.state_cache`).

A fake of Spark's state (per task attempt: a copy of the committed version, committed or
dropped at its end) stands in for the state server; it counts the list reads that went to
it. A read may skip the state only when the copy is provably the state's content.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from streaming.stage.state_cache import CachedList, LocalCopies, RowCodec
from streaming.stage.windows import PACK_STATE_SCHEMA, PAYLOAD_SCHEMA

ROUTE = 7


class FakeState:
    """Spark's state store for one key: a committed version, and a task attempt's view."""

    def __init__(self) -> None:
        self.committed: dict[str, Any] = {}
        self.view: dict[str, Any] = {}
        self.list_reads = 0

    def attempt(self) -> None:
        self.view = copy.deepcopy(self.committed)

    def commit(self) -> None:
        self.committed = copy.deepcopy(self.view)


class FakeList:
    def __init__(self, state: FakeState, name: str) -> None:
        self.state, self.name = state, name

    def get(self) -> list[tuple[Any, ...]]:
        self.state.list_reads += 1
        # as the state server gives them: binary values as bytearray
        rows = self.state.view.get(self.name, [])
        return [tuple(bytearray(v) if isinstance(v, bytes) else v for v in r) for r in rows]

    def exists(self) -> bool:
        return self.name in self.state.view

    def put(self, rows: list[tuple[Any, ...]]) -> None:
        self.state.view[self.name] = list(rows)

    def appendList(self, rows: list[tuple[Any, ...]]) -> None:
        self.state.view[self.name] = [*self.state.view.get(self.name, []), *rows]

    def clear(self) -> None:
        self.state.view.pop(self.name, None)


class FakeValue(FakeList):
    def get(self) -> Any:  # type: ignore[override]
        return self.state.view.get(self.name)

    def update(self, value: tuple[Any, ...]) -> None:
        self.state.view[self.name] = value


class FakeHandle:
    def __init__(self, state: FakeState) -> None:
        self.state = state

    def getListState(self, name: str, schema: Any) -> FakeList:
        return FakeList(self.state, name)

    def getValueState(self, name: str, schema: Any) -> FakeValue:
        return FakeValue(self.state, name)


def packs(*panes: int) -> list[tuple[int, int, bytes]]:
    return [(pane, 3, f"payload of {pane}".encode() * 50) for pane in panes]


@pytest.fixture
def state() -> FakeState:
    state = FakeState()
    state.attempt()
    return state


def cached(state: FakeState, directory: Path | None, name: str = "packs_0") -> CachedList:
    copies = None if directory is None else LocalCopies(directory)
    return CachedList(FakeHandle(state), name, PACK_STATE_SCHEMA, copies)  # type: ignore[arg-type]


def test_a_list_the_bucket_wrote_is_read_from_its_copy(state: FakeState, tmp_path: Path) -> None:
    packs_0 = cached(state, tmp_path)
    packs_0.append(ROUTE, packs(0))
    packs_0.append(ROUTE, packs(240_000))  # the copy follows the appends
    state.commit()
    state.attempt()
    assert packs_0.get(ROUTE) == packs(0, 240_000)
    packs_0.put(ROUTE, packs(240_000))
    assert packs_0.get(ROUTE) == packs(240_000)
    assert state.list_reads == 0
    assert len(list(tmp_path.iterdir())) == 1  # one file per (route, list)


def test_a_copy_in_another_worker_process_is_read_too(state: FakeState, tmp_path: Path) -> None:
    cached(state, tmp_path).put(ROUTE, packs(0))
    elsewhere = cached(state, tmp_path)  # a task of the bucket on another Python worker
    assert elsewhere.get(ROUTE) == packs(0)
    assert state.list_reads == 0


def test_a_failed_attempt_leaves_no_copy_the_retry_would_take(
    state: FakeState, tmp_path: Path
) -> None:
    packs_0 = cached(state, tmp_path)
    packs_0.put(ROUTE, packs(0))
    state.commit()
    state.attempt()
    packs_0.append(ROUTE, packs(60_000))  # this attempt fails: its state is dropped
    state.attempt()  # the retry resumes from the committed version
    assert packs_0.get(ROUTE) == packs(0)
    assert state.list_reads == 1
    assert packs_0.get(ROUTE) == packs(0)  # and it left a copy of that
    assert state.list_reads == 1


def test_a_list_changed_by_another_executor_is_read_from_the_state(
    state: FakeState, tmp_path: Path
) -> None:
    here = cached(state, tmp_path)
    here.put(ROUTE, packs(0))
    there = cached(state, tmp_path / "other-executor")
    there.append(ROUTE, packs(60_000))
    assert here.get(ROUTE) == packs(0, 60_000)
    assert state.list_reads == 1


def test_an_append_to_a_list_with_no_copy_leaves_none(state: FakeState, tmp_path: Path) -> None:
    before = cached(state, None)  # no local dir: the state only
    before.put(ROUTE, packs(0))
    packs_0 = cached(state, tmp_path)
    packs_0.append(ROUTE, packs(60_000))
    assert packs_0.get(ROUTE) == packs(0, 60_000)
    assert state.list_reads == 1


def test_a_list_from_before_tokens_is_read_once_then_copied(
    state: FakeState, tmp_path: Path
) -> None:
    state.view["packs_0"] = packs(0)  # an older version's checkpoint: no token
    packs_0 = cached(state, tmp_path)
    assert packs_0.get(ROUTE) == packs(0)
    assert packs_0.get(ROUTE) == packs(0)
    assert state.list_reads == 1


def test_a_cleared_list_is_known_empty(state: FakeState, tmp_path: Path) -> None:
    packs_0 = cached(state, tmp_path)
    packs_0.put(ROUTE, packs(0))
    packs_0.put(ROUTE, [])
    assert "packs_0" not in state.view
    packs_0.append(ROUTE, packs(240_000))
    assert packs_0.get(ROUTE) == packs(240_000)
    assert state.list_reads == 0


@pytest.mark.parametrize("damage", ["truncate", "flip", "remove"])
def test_a_damaged_or_missing_copy_is_a_state_read(
    state: FakeState, tmp_path: Path, damage: str
) -> None:
    packs_0 = cached(state, tmp_path)
    packs_0.put(ROUTE, packs(0, 60_000))
    (copy_file,) = tmp_path.iterdir()
    data = copy_file.read_bytes()
    if damage == "truncate":
        copy_file.write_bytes(data[:-10])
    elif damage == "flip":
        copy_file.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        copy_file.unlink()
    assert packs_0.get(ROUTE) == packs(0, 60_000)
    assert state.list_reads == 1


def test_an_unwritable_local_dir_is_no_error(state: FakeState, tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    packs_0 = cached(state, blocked / "copies")
    packs_0.put(ROUTE, packs(0))
    assert packs_0.get(ROUTE) == packs(0)
    assert state.list_reads == 1


def test_lists_of_routes_and_names_keep_apart(state: FakeState, tmp_path: Path) -> None:
    packs_0, packs_1 = cached(state, tmp_path), cached(state, tmp_path, "packs_1")
    packs_0.put(ROUTE, packs(0))
    packs_1.put(ROUTE, packs(60_000))
    other = FakeState()
    other.attempt()
    cached(other, tmp_path).put(ROUTE + 1, packs(120_000))
    assert (packs_0.get(ROUTE), packs_1.get(ROUTE)) == (packs(0), packs(60_000))
    assert state.list_reads == 0
    assert len(list(tmp_path.iterdir())) == 3


def test_the_codec_round_trips_rows_and_refuses_what_it_did_not_write() -> None:
    codec = RowCodec(PAYLOAD_SCHEMA)
    rows = [(b"",), (bytes(range(256)) * 10,)]
    assert codec.load(b"".join(codec.dump(rows))) == rows
    assert codec.load(b"") is None
    assert codec.load(b"PBL1" + bytes(12)) == []  # no rows: an empty list
    assert codec.load(b"PBL1" + bytes(4) + bytes([1]) + bytes(7)) is None  # a row missing
    assert RowCodec(PACK_STATE_SCHEMA).load(b"".join(codec.dump(rows))) is None
