"""The event-time watermark stored in a Spark checkpoint: read it, check it, reset it.

Spark keeps the watermark in the checkpoint's metadata logs: `offsets/<batch>` (a version
line, a JSON line with `batchWatermarkMs`, then one line of offsets per source) and
`commits/<batch>` (a version line, then JSON with `nextBatchWatermarkMs`). At restart it
resumes from the larger of the latest two. A watermark far ahead of the clock (one event
stamped in the future, before the future-skew rule existed) makes every event late, across
restarts: `check_watermark` stops the start with one line, and `reset_watermark` rewrites
only those two numbers, so the source offsets (and the windows' state) are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

_OFFSETS_KEY = "batchWatermarkMs"
_COMMITS_KEY = "nextBatchWatermarkMs"


class FutureWatermarkError(ValueError):
    """The checkpoint's watermark is ahead of the clock by more than the future skew."""


@dataclass(frozen=True, slots=True)
class StoredWatermark:
    batch_id: int  # the latest batch of the offset log
    watermark_ms: int  # what Spark resumes with: the larger of offsets' and commits' values


def _latest(log_dir: Path) -> Path | None:
    batches = [p for p in log_dir.glob("[0-9]*") if p.name.isdigit()] if log_dir.is_dir() else []
    return max(batches, key=lambda p: int(p.name), default=None)


def _metadata_line(path: Path, line_no: int) -> tuple[list[str], dict[str, object]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if len(lines) <= line_no:
        raise ValueError(f"{path}: not a Spark metadata log entry (too short)")
    try:
        meta = json.loads(lines[line_no])
    except ValueError:
        raise ValueError(f"{path}: line {line_no + 1} is not JSON") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: line {line_no + 1} is not a JSON object")
    return lines, meta


def stored_watermark(checkpoint_dir: Path | str) -> StoredWatermark | None:
    """The watermark Spark would resume with, or None for a new checkpoint."""
    root = Path(checkpoint_dir)
    offsets = _latest(root / "offsets")
    if offsets is None:
        return None
    _, meta = _metadata_line(offsets, 1)
    watermark_ms = int(meta.get(_OFFSETS_KEY, 0))  # type: ignore[call-overload]
    commit = root / "commits" / offsets.name
    if commit.is_file():
        _, committed = _metadata_line(commit, 1)
        watermark_ms = max(watermark_ms, int(committed.get(_COMMITS_KEY, 0)))  # type: ignore[call-overload]
    return StoredWatermark(int(offsets.name), watermark_ms)


def check_watermark(
    checkpoint_dir: Path | str, *, now_ms: int, max_future_skew_ms: int
) -> StoredWatermark | None:
    """Raise `FutureWatermarkError` (one line) when the stored watermark is too far ahead."""
    stored = stored_watermark(checkpoint_dir)
    if stored is None or stored.watermark_ms <= now_ms + max_future_skew_ms:
        return stored
    at = datetime.fromtimestamp(stored.watermark_ms / 1000, tz=UTC).isoformat(timespec="seconds")
    ahead_s = (stored.watermark_ms - now_ms) // 1000
    raise FutureWatermarkError(
        f"checkpoint {checkpoint_dir}: its event-time watermark ({at}, batch "
        f"{stored.batch_id}) is {ahead_s} s ahead of the clock, more than "
        f"spark.max_future_skew_s: every event would be late. Run `pulsar-balancer "
        f"reset-watermark --config FILE` (keeps the offsets; docs/runbook.md)"
    )


def reset_watermark(checkpoint_dir: Path | str, *, watermark_ms: int = 0) -> StoredWatermark:
    """Set the stored watermark of the latest batch to `watermark_ms` (0: none; Spark then
    derives it again from the events it reads). Offsets and state are kept. Run it only
    while no query uses the checkpoint.
    """
    root = Path(checkpoint_dir)
    offsets = _latest(root / "offsets")
    if offsets is None:
        raise ValueError(f"checkpoint {checkpoint_dir}: no offset log (nothing to reset)")
    _rewrite(offsets, _OFFSETS_KEY, watermark_ms)
    commit = root / "commits" / offsets.name
    if commit.is_file():
        _rewrite(commit, _COMMITS_KEY, watermark_ms)
    return StoredWatermark(int(offsets.name), watermark_ms)


def _rewrite(path: Path, key: str, value: int) -> None:
    lines, meta = _metadata_line(path, 1)
    meta[key] = value
    lines[1] = json.dumps(meta, separators=(",", ":"))
    tmp = path.with_name(f".{path.name}.reset-watermark.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)
    # Hadoop's local file system keeps a checksum beside each file; a stale one fails the
    # read, and without one the file is read unchecked.
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
