"""The inspection CLI: topic-info, split-points, offload-point; one JSON document with
--output json, a table otherwise, and a one-line error with exit code 2 on bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from balancer.app.cli import COMMAND_MODULES, main
from balancer.core.hashing import hash_position

MIB = 1024 * 1024


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--output", "json")
    assert code == 0, err
    return json.loads(out)  # exactly one document: json.loads fails on trailing data


def event(
    topic: str, rate: float = 0.0, throughput: float = 0.0, ts: int = 1_700_000_000_000
) -> dict[str, Any]:
    return {
        "cluster": "c1",
        "topic": topic,
        "timestamp_ms": ts,
        "msgRateIn": rate,
        "msgRateOut": 0,
        "msgThroughputIn": throughput,
        "msgThroughputOut": 0,
        "storageSize": 0,
        "backlogSize": 0,
        "offloadedStorageSize": 0,
        "producerCount": 1,
        "consumerCount": 0,
    }


def write_lines(path: Path, *items: Any) -> str:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return str(path)


def test_command_modules_is_a_plain_tuple() -> None:
    assert isinstance(COMMAND_MODULES, tuple)
    assert "balancer.app.commands.inspect" in COMMAND_MODULES


# --- topic-info -------------------------------------------------------------------------------


def test_topic_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "topic-info", "my-topic", "t/ns/orders-partition-3", "--buckets", "3")
    first, second = doc["topics"]
    assert first["topic"] == "persistent://public/default/my-topic"
    assert (first["position"], first["positionHex"]) == (0x2BAD45F7, "0x2bad45f7")
    assert first["bundle"] == "0x00000000_0x40000000"  # Pulsar's 4 initial bundles
    assert first["partitionIndex"] is None
    assert second["partitionIndex"] == 3
    assert second["baseTopic"] == "persistent://t/ns/orders"
    assert (
        second["metadataPath"]
        == f"/managed-ledgers/t/ns/persistent/${second['bucket']}/orders-partition-3"
    )
    assert doc["bundles"]["numBundles"] == 4 and doc["numberOfTopicBuckets"] == 3


def test_topic_info_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "topic-info", "my-topic", "--bundles", "16")
    assert doc["topics"][0]["bundle"] == "0x20000000_0x30000000"
    doc = run_json(
        capsys, "topic-info", "my-topic", "--boundaries", "0x00000000", "0x2bad45f7", "0xffffffff"
    )
    assert doc["topics"][0]["bundle"] == "0x2bad45f7_0xffffffff"
    doc = run_json(capsys, "topic-info", "non-persistent://t/ns/x")
    assert doc["topics"][0]["metadataPath"] is None
    assert doc["topics"][0]["metadataPath"] is None


def test_topic_info_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topic-info", "my-topic")
    assert code == 0
    assert "persistent://public/default/my-topic" in out and "0x2bad45f7" in out
    assert (
        "0x00000000_0x40000000" in out
        and "/managed-ledgers/public/default/persistent/my-topic" in out
    )


# --- split-points -----------------------------------------------------------------------------


@pytest.fixture
def stats_file(tmp_path: Path) -> str:
    names = [f"persistent://t/ns/topic-{i}" for i in range(6)]
    return write_lines(
        tmp_path / "stats.jsonl",
        *[event(n, 10_000) for n in names[:3]],
        {"events": [event(n, 10_000) for n in names[3:]]},  # an envelope line
    )


def test_split_points_balanced_json(capsys: pytest.CaptureFixture[str], stats_file: str) -> None:
    doc = run_json(
        capsys, "split-points", "--bundle", "0x00000000_0xffffffff", "--stats", stats_file
    )
    assert doc["bundle"] == "0x00000000_0xffffffff"
    assert doc["algorithm"] == "balanced_flow_divide"  # the default
    assert len(doc["boundaries"]) == 2  # 60000 msg/s, target 24000: 3 children of 20000
    assert [c["msgRate"] for c in doc["children"]] == [20000.0, 20000.0, 20000.0]
    assert [c["topics"] for c in doc["children"]] == [2, 2, 2]
    assert set(doc["children"][0]) == {"range", "topics", "msgRate", "throughput"}
    assert doc["children"][0]["range"].startswith("0x00000000_")


def test_split_points_other_algorithms(capsys: pytest.CaptureFixture[str], stats_file: str) -> None:
    full = ("--bundle", "0x00000000_0xffffffff", "--stats", stats_file)
    doc = run_json(capsys, "split-points", "--algorithm", "range_equally_divide", *full)
    assert doc["boundaries"] == [0x7FFFFFFF]
    doc = run_json(capsys, "split-points", "--algorithm", "flow_or_qps_equally_divide", *full)
    assert len(doc["boundaries"]) == 1  # greedy runs of up to 30000 msg/s: 3 + 3 topics
    doc = run_json(
        capsys,
        "split-points",
        "--algorithm",
        "specified_positions_divide",
        "--positions",
        "0x10000000",
        "268435457",
        *full,
    )
    assert doc["boundaries"] == [0x10000000, 0x10000001]
    doc = run_json(capsys, "split-points", "--max-msg-rate", "100000", *full)
    assert doc["boundaries"] == [] and len(doc["children"]) == 1  # under threshold: no split
    doc = run_json(capsys, "split-points", "--max-children", "2", *full)
    assert len(doc["children"]) == 2


def test_split_points_ignores_topics_outside_and_takes_latest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, b = "persistent://t/ns/a", "persistent://t/ns/b"
    lower = min(hash_position(a), hash_position(b))
    upper = max(hash_position(a), hash_position(b)) + 1
    outside = next(
        name
        for name in (f"persistent://t/ns/o{i}" for i in range(100))
        if not lower <= hash_position(name) < upper
    )
    path = write_lines(
        tmp_path / "s.jsonl",
        event(a, 1.0, ts=1_700_000_060_000),
        event(a, 25_000, ts=1_700_000_000_000),  # older: the latest sample (1 msg/s) counts
        event(b, 25_000),
        event(outside, 1e6),
    )
    bundle = f"0x{lower:08x}_0x{upper:08x}"
    doc = run_json(capsys, "split-points", "--bundle", bundle, "--stats", path)
    assert doc["boundaries"] == []  # 25001 msg/s is under 30000
    assert doc["children"] == [
        {"range": bundle, "topics": 2, "msgRate": 25_001.0, "throughput": 0.0}
    ]


def test_split_points_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = "\n".join(json.dumps(event(f"t/ns/x{i}", 20_000)) for i in range(2)) + "\n\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    doc = run_json(capsys, "split-points", "--bundle", "0x00000000_0xffffffff", "--stats", "-")
    assert len(doc["children"]) == 2


def test_split_points_table(capsys: pytest.CaptureFixture[str], stats_file: str) -> None:
    code, out, _ = run(
        capsys, "split-points", "--bundle", "0x00000000_0xffffffff", "--stats", stats_file
    )
    assert code == 0
    assert "balanced_flow_divide: split 0x00000000_0xffffffff at" in out and "(3 children)" in out
    code, out, _ = run(
        capsys,
        "split-points",
        "--bundle",
        "0x00000000_0xffffffff",
        "--stats",
        stats_file,
        "--max-msg-rate",
        "1e6",
    )
    assert "no split of 0x00000000_0xffffffff" in out


def test_split_points_namespaces(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl", event("t/a/x", 40_000), event("t/a/y", 1), event("t/b/z", 1)
    )
    code, _, err = run(capsys, "split-points", "--bundle", "0x00000000_0xffffffff", "--stats", path)
    assert code == 2 and "several namespaces" in err and "--namespace" in err
    doc = run_json(
        capsys,
        "split-points",
        "--bundle",
        "0x00000000_0xffffffff",
        "--stats",
        path,
        "--namespace",
        "t/a",
    )
    assert sum(c["topics"] for c in doc["children"]) == 2


# --- offload-point ----------------------------------------------------------------------------


@pytest.fixture
def internal_stats(tmp_path: Path) -> str:
    path = tmp_path / "internal.json"
    path.write_text(
        json.dumps(
            {
                "ledgers": [
                    {"ledgerId": 0, "entries": 10, "size": 1000},
                    {"ledgerId": 1, "entries": 10, "size": 2000},
                    {"ledgerId": 2, "entries": 10},
                ],
                "currentLedgerSize": 3000,
            }
        )
    )
    return str(path)


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        ("0", {"ledgerId": 2, "entryId": 0, "partitionIndex": -1}),
        ("5000", {"ledgerId": 1, "entryId": 0, "partitionIndex": -1}),
        ("6000", None),
        ("1M", None),
    ],
    ids=["0", "5000", "6000", "1M"],
)
def test_offload_point_json(
    capsys: pytest.CaptureFixture[str], internal_stats: str, threshold: str, expected: Any
) -> None:
    assert (
        run_json(
            capsys, "offload-point", "--threshold", threshold, "--internal-stats", internal_stats
        )
        == expected
    )


def test_offload_point_table(capsys: pytest.CaptureFixture[str], internal_stats: str) -> None:
    code, out, _ = run(
        capsys, "offload-point", "--threshold", "5000", "--internal-stats", internal_stats
    )
    assert code == 0 and "before ledger 1" in out
    code, out, _ = run(
        capsys, "offload-point", "--threshold", "1G", "--internal-stats", internal_stats
    )
    assert code == 0 and "Nothing to offload" in out


# --- errors and help --------------------------------------------------------------------------

ERRORS = [
    (["topic-info", "a/b/c/d"], "short name"),
    (["topic-info", "x", "--bundles", "0"], "must be >= 1"),
    (["topic-info", "x", "--bundles", "4000000000"], "more than 65536 bundles"),
    (["topic-info", "x", "--bundles", "2", "--boundaries", "0x0"], "not allowed with"),
    (["topic-info", "x", "--boundaries", "0x00000000", "0x10"], "end at 0xffffffff"),
    (["topic-info", "x", "--buckets", "zero"], "not an integer"),
    (["split-points", "--bundle", "0x0_0x1", "--stats", "-"], "invalid bundle range"),
    (
        ["split-points", "--bundle", "0x00000000_0xffffffff", "--stats", "/no/such/file"],
        "No such file",
    ),
    (
        ["split-points", "--bundle", "0x00000000_0xffffffff", "--stats", "-", "--algorithm", "x"],
        "invalid choice",
    ),
    (
        ["split-points", "--bundle", "0x00000000_0xffffffff", "--stats", "-", "--fill-factor", "2"],
        "fill_factor",
    ),
    (
        [
            "split-points",
            "--bundle",
            "0x00000000_0xffffffff",
            "--stats",
            "-",
            "--max-children",
            "0",
        ],
        "max_children",
    ),
    (
        [
            "split-points",
            "--bundle",
            "0x00000000_0xffffffff",
            "--stats",
            "-",
            "--positions",
            "0xzz",
        ],
        "invalid hash position",
    ),
    (["split-points", "--bundle", "0x00000000_0xffffffff"], "required: --stats"),
    (["offload-point", "--threshold", "5X", "--internal-stats", "-"], "invalid size '5X'"),
    (["offload-point", "--threshold", "5M", "--internal-stats", "/no/such/file"], "No such file"),
    (["no-such-command"], "invalid choice"),
    (["topic-info", "x" * 100_000], "is 100000 bytes long; at most 8192"),
    (["topic-info", "t/ns/a\x07b"], "control character U+0007 at position 6"),
    (["topic-info", "ok", "t/ns/\x1b[31mred"], "control character U+001B"),
    (["topic-info", "t/ns/line\nbreak"], "control character U+000A"),
]


@pytest.mark.parametrize(("argv", "message"), ERRORS, ids=[" ".join(a)[:60] for a, _ in ERRORS])
def test_bad_input_is_one_line_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"cluster": "c"}\n', "stats line 1: missing_field"),
        ("\n" + json.dumps(event("t/ns/x", -1)) + "\n", "stats line 2: negative_value"),
        ("not json\n", "stats line 1: bad_json"),
    ],
    ids=["missing-field", "negative", "not-json"],
)
def test_bad_stats_name_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(content)
    code, _, err = run(
        capsys, "split-points", "--bundle", "0x00000000_0xffffffff", "--stats", str(path)
    )
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"ledgers": [{"size": 1}]}', "ledgerId"),
        ("[" * 100_000, "nested too deeply"),
        ('{"ledgers": ' + "[" * 100_000, "nested too deeply"),
    ],
    ids=["bad-json", "array", "no-ledger-id", "deep-array", "deep-in-object"],
)
def test_bad_internal_stats(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "i.json"
    path.write_text(content)
    code, _, err = run(capsys, "offload-point", "--threshold", "1M", "--internal-stats", str(path))
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["topic-info", "--help"], ["split-points", "--help"], ["offload-point", "--help"]],
    ids=str,
)
def test_help_everywhere(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "usage: pulsar-balancer" in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2 and "usage: pulsar-balancer" in err
