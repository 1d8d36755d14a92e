"""The watermark stored in a Spark checkpoint: read, refused when far ahead, reset.

The files are written in the layout Spark 4 writes (`offsets/<batch>`: a version line, the
metadata JSON, one offsets line per source; `commits/<batch>`: a version line and JSON;
Hadoop's `.<batch>.crc` beside each). tests/streaming/test_job_watermark.py shows that Spark
itself resumes with what these functions read and write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from balancer.app.cli import main
from balancer.app.config import BalancerConfig
from balancer.app.wiring import BalancerApp
from streaming.spark.checkpoint import (
    FutureWatermarkError,
    StoredWatermark,
    check_watermark,
    reset_watermark,
    stored_watermark,
)

NOW_MS = 1_795_383_896_504
DAY_MS = 86_400_000
SKEW_MS = 600_000
OFFSETS = '{"0": 287, "1": 492}'


def write_checkpoint(root: Path, watermarks: dict[int, tuple[int, int | None]]) -> None:
    """batch -> (batchWatermarkMs, nextBatchWatermarkMs or None: not committed)."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, (offsets_ms, commit_ms) in watermarks.items():
        meta = {"batchWatermarkMs": offsets_ms, "batchTimestampMs": NOW_MS, "conf": {"a": "1"}}
        (root / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{OFFSETS}")
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
        if commit_ms is not None:
            (root / "commits" / str(batch)).write_text(
                f'v1\n{{"nextBatchWatermarkMs":{commit_ms}}}'
            )
            (root / "commits" / f".{batch}.crc").write_bytes(b"crc")


def test_the_watermark_spark_resumes_with_is_read(tmp_path: Path) -> None:
    assert stored_watermark(tmp_path / "new") is None
    write_checkpoint(tmp_path, {9: (100, 200), 10: (NOW_MS, NOW_MS + 5)})
    assert stored_watermark(tmp_path) == StoredWatermark(10, NOW_MS + 5)


def test_an_uncommitted_batch_resumes_with_its_offsets_watermark(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, {3: (NOW_MS - 1, NOW_MS), 4: (NOW_MS + DAY_MS, None)})
    assert stored_watermark(tmp_path) == StoredWatermark(4, NOW_MS + DAY_MS)


def test_a_watermark_within_the_skew_passes_one_beyond_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    write_checkpoint(tmp_path, {0: (NOW_MS + SKEW_MS, NOW_MS + SKEW_MS)})
    check_watermark(tmp_path, now_ms=NOW_MS, max_future_skew_ms=SKEW_MS)
    with pytest.raises(FutureWatermarkError) as refused:
        check_watermark(tmp_path, now_ms=NOW_MS - 1, max_future_skew_ms=SKEW_MS)
    message = str(refused.value)
    assert "\n" not in message and "reset-watermark" in message and str(tmp_path) in message


def test_reset_rewrites_only_the_watermark_of_the_latest_batch(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, {6: (5, 5), 7: (NOW_MS + DAY_MS, NOW_MS + DAY_MS)})
    older = (tmp_path / "offsets" / "6").read_text()
    reset_watermark(tmp_path)
    assert stored_watermark(tmp_path) == StoredWatermark(7, 0)
    version, meta, offsets = (tmp_path / "offsets" / "7").read_text().split("\n")
    assert (version, offsets) == ("v1", OFFSETS)
    assert json.loads(meta) == {"batchWatermarkMs": 0, "batchTimestampMs": NOW_MS,
                                "conf": {"a": "1"}}  # fmt: skip
    assert (tmp_path / "offsets" / "6").read_text() == older
    # Stale checksums would fail Spark's read of the rewritten files.
    assert not (tmp_path / "offsets" / ".7.crc").exists()
    assert not (tmp_path / "commits" / ".7.crc").exists()
    assert (tmp_path / "offsets" / ".6.crc").exists()


def test_the_cli_resets_the_checkpoint_of_a_config_and_refuses_an_empty_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "checkpoint"
    config = tmp_path / "balancer.yaml"
    config.write_text(
        "kafka: {bootstrap_servers: ['127.0.0.1:9']}\n"
        f"spark: {{checkpoint_dir: '{checkpoint}'}}\n"
        "clusters: [{name: east, admin_url: 'http://127.0.0.1:9'}]\n"
    )
    assert main(["reset-watermark", "--config", str(config)]) == 2
    assert "no offset log" in capsys.readouterr().err
    write_checkpoint(checkpoint, {0: (NOW_MS + DAY_MS, NOW_MS + DAY_MS)})
    assert main(["reset-watermark", "--config", str(config)]) == 0
    assert stored_watermark(checkpoint) == StoredWatermark(0, 0)


def test_the_app_refuses_to_start_on_a_checkpoint_far_ahead(tmp_path: Path) -> None:
    config = BalancerConfig.embedded_default(
        bootstrap_servers=["127.0.0.1:9"], clusters=[("east", "http://127.0.0.1:9")],
        state_dir=tmp_path,
    )  # fmt: skip
    write_checkpoint(tmp_path / "checkpoints", {0: (NOW_MS * 2, NOW_MS * 2)})
    app = BalancerApp(config)
    try:
        # Refused before anything starts: no Kafka is reachable at 127.0.0.1:9.
        with pytest.raises(FutureWatermarkError, match=r"spark\.max_future_skew_s"):
            app.start()
        assert app.health is None and app.query is None
    finally:
        app.stop()
