"""Smoke tests for the benchmarks: each runs as `python -m bench.<name>` on a tiny input and
must end with a well-formed `RESULT <json>` line, so the benchmarks cannot rot unnoticed.

The figures themselves are for people (docs/benchmarks.md), not assertions; only what the
model guarantees by construction is checked (e.g. Pulsar's schedule splits on the 4th check).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from balancer.app.replay.pulsar_policies import PULSAR_POLICIES
from balancer.core.arrow_envelope import is_arrow_envelope
from balancer.core.events import Rejection, parse_message
from balancer.core.round_marker import is_round_marker

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = {
    "balanced_flow_divide",
    "range_equally_divide",
    "topic_count_equally_divide",
    "flow_or_qps_equally_divide",
    "specified_positions_divide",
}

# One namespace of two bundles carrying about 3x the msgRate threshold (in + out), with one
# outstanding topic: every bundle starts over threshold and any algorithm can fix it.
TINY_SCENARIO = """
name: tiny
seed: 1
clusters: [{name: c1}]
namespaces:
  - name: t/ns
    cluster: c1
    bundles: 2
    topic_groups:
      - {name: x, count: 40, total_msg_rate_in: 40000, zipf_exponent: 1.0}
    outstanding:
      - {topic: x-7, msg_rate_in: 8000}
"""


def run_bench(name: str, *args: str, timeout_s: float = 60) -> tuple[str, dict[str, Any]]:
    """Run one benchmark; its stdout and the JSON document of its last line."""
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    # bench.pipeline, bench.read_task (and bench.scale's children) add one plain summary
    # line after it.
    summary = lines[-1].startswith(("events_per_s=", "task_records_per_s="))
    last = lines[-2] if summary else lines[-1]
    assert last.startswith("RESULT "), last
    result = json.loads(last.removeprefix("RESULT "))
    assert result["machine"]["cores"] >= 1
    assert result["machine"]["python"].startswith("3.")
    return done.stdout, result


@pytest.fixture
def tiny_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SCENARIO, encoding="utf-8")
    return path


def test_split_quality_on_a_tiny_scenario(tiny_scenario: Path, tmp_path: Path) -> None:
    img = tmp_path / "img"
    out, result = run_bench(
        "split_quality", str(tiny_scenario), "--growth-hours", "2", "--img-dir", str(img)
    )
    assert "| scenario | algorithm | rounds |" in out
    tiny = result["scenarios"]["tiny"]
    assert set(tiny["algorithms"]) == ALGORITHMS
    for name, figures in tiny["algorithms"].items():
        # Every algorithm had an overloaded bundle to split and did split it.
        assert figures["splits"] >= 1, name
        assert figures["bundles_after"] > figures["bundles_before"] == 2, name
        assert figures["growth_splits"] >= 0, name
    png = Path(tiny["png"])
    assert png.parent == img
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reaction_time_on_a_tiny_scenario(tiny_scenario: Path) -> None:
    out, result = run_bench(
        "reaction_time", str(tiny_scenario), "--horizon-min", "15", "--no-built-in"
    )
    assert "| scenario | schedule |" in out
    schedules = result["scenarios"]["tiny"]
    assert len(schedules) == 4
    for name, figures in schedules.items():
        assert figures["first_over_s"] == 600.0, name  # right after the 10-minute warm-up
        assert figures["to_first_split_s"] is not None, name
    pulsar = schedules["Pulsar extensible: range_equally_divide"]
    assert pulsar["to_first_split_s"] == 180.0  # the 4th one-minute check over threshold
    # The config's schedule (the first modelled): the 3rd sample's window, closed by its
    # round marker, emitted two 15 s triggers later (issue 36: no later than Pulsar).
    ours = next(f for name, f in schedules.items() if "round marker, trigger 15 s" in name)
    assert ours["to_first_split_s"] == 150.0


def test_split_time_on_a_tiny_bundle() -> None:
    out, result = run_bench("split_time", "--sizes", "300", "--repeats", "2")
    assert "| topics |" in out
    timings = result["sizes"]["300"]["algorithms"]
    assert set(timings) == ALGORITHMS
    for name, figures in timings.items():
        assert figures["compute_split_s"] > 0, name
        assert figures["runs"] == 2, name
        assert figures["children"] >= 2, name  # the bundle is over threshold: all split


def test_partials_on_tiny_buckets() -> None:
    _, result = run_bench(
        "partials", "--namespaces", "3", "--bundles", "2", "--rows", "300", "--buckets", "2",
        "--repeat", "2",
    )  # fmt: skip
    assert len(result["runs_s"]) == 2
    # 300 topics a bucket at random positions: every bundle of both buckets has some.
    assert result["partial_rows"] == 2 * 3 * 2


@pytest.mark.spark
@pytest.mark.kafka
def test_pipeline_on_a_tiny_stream_counts_its_window_closes() -> None:
    # Three minutes of 200 topics: the first windows close within the run.
    out, result = run_bench(
        "pipeline", "--events", "600", "--topics", "200", "--envelope", "50",
        "--max-offsets-per-trigger", "4", "--window-s", "60", "--slide-s", "60",
        "--watermark-s", "0", timeout_s=600,
    )  # fmt: skip
    assert result["events"] == 600
    assert result["windows_closed"] >= 1
    assert result["close_batch_s"] > 0
    assert 0 <= result["close_driver_s"] <= result["close_batch_s"]
    assert result["events_per_s"] > 0
    assert "window close: slowest closing batch" in out
    # CPU per batch beside its wall time (bench.cpu_tree): the job's processes spent some.
    assert result["steady_cpu_s_per_m_events"]["total"] > 0
    assert result["target_ratio"] == 0.167
    # every batch in order: the events (and the tick moving the watermark), the closes
    log = result["batch_log"]
    assert sum(events for events, _, _ in log) == 601
    assert sum(closed for _, _, closed in log) == result["windows_closed"]
    assert all(seconds > 0 for _, seconds, _ in log)
    # The first close rolls its bundles up in a job of its own; later ones (static layouts)
    # come with the window stage's partials. How many batches close depends on how the
    # broker's partitions fill the batches: the exact rule is tests/streaming/test_rollup_spark.
    closing = sum(1 for _, _, closed in log if closed)
    assert result["stage_partials_closes"] <= closing - 1
    if closing >= 2:
        assert result["stage_partials_closes"] >= 1


@pytest.mark.kafka
def test_read_task_on_a_tiny_partition() -> None:
    out, result = run_bench("read_task", "--events", "300", "--topics", "20", "--repeat", "1")
    assert (result["messages"], result["envelope_format"]) == (300, "json")  # single events
    assert result["task_records_per_s"] > 0 and result["raw_records_per_s"] > 0
    assert "read task, raw:" in out


@pytest.mark.kafka
def test_read_task_on_cold_envelopes() -> None:
    out, result = run_bench(
        "read_task", "--events", "300", "--topics", "300", "--repeat", "2",
        "--envelope", "50", "--cold", "--compression", "gzip",
    )  # fmt: skip
    assert (result["messages"], result["envelope"], result["cold"]) == (6, 50, True)
    assert result["compression"] == "gzip" and result["task_events_per_s"] > 0
    assert result["envelope_format"] == "arrow"  # what the collector sends
    assert "read task, parsed (cold):" in out
    assert "(5 rows: packs and the summary)" in out  # a pack for each of 4 buckets, 1 pane


@pytest.mark.kafka
def test_read_task_on_json_envelopes() -> None:
    out, result = run_bench(
        "read_task", "--events", "300", "--topics", "300", "--repeat", "1",
        "--envelope", "50", "--envelope-format", "json",
    )  # fmt: skip
    assert (result["messages"], result["envelope_format"]) == (6, "json")
    assert "(5 rows: packs and the summary)" in out  # every event kept, as with Arrow


def test_scale_counts_the_interval_per_minute_of_stats() -> None:
    from bench.scale import ScaleResult

    one = ScaleResult(1000, 1000, None, None, None, 1.0, 10.0, interval_s=30.0)
    assert (one.minutes, one.minute_s, one.keeps_up, one.max_topics_at_interval) == (
        1, 30.0, True, 2000,
    )  # fmt: skip
    # Two reports per topic: two minutes of stats, whose work must each fit in 60 s.
    two = ScaleResult(1000, 2000, None, None, None, 1.0, 10.0, interval_s=150.0)
    assert (two.minutes, two.minute_s, two.keeps_up, two.max_topics_at_interval) == (
        2, 75.0, False, 800,
    )  # fmt: skip
    assert ScaleResult(1000, 1000, None, None, None, 1.0, 10.0).keeps_up is None


def test_scale_gives_the_steady_minute_as_a_ratio_to_the_raw_rate() -> None:
    from bench.pipeline import TARGET_RATIO
    from bench.scale import ScaleResult

    # 10M topics in a 60 s steady minute on a machine reading 1.0M events/s raw: the target.
    at_target = ScaleResult(
        10_000_000, 40_000_000, 150_000.0, 1_000_000.0, 0.15, 9.0, 900.0, steady_minute_s=60.0
    )
    assert at_target.steady_minute_events_per_s == pytest.approx(166_667, abs=1)
    assert at_target.steady_minute_ratio == pytest.approx(TARGET_RATIO, abs=0.001)
    # The same minute on a machine whose raw rate is half: twice the ratio.
    slow_raw = ScaleResult(10_000_000, 40_000_000, None, 500_000.0, None, 9.0, 900.0,
                           steady_minute_s=60.0)  # fmt: skip
    assert slow_raw.steady_minute_ratio == pytest.approx(2 * TARGET_RATIO, abs=0.002)
    no_raw = ScaleResult(1000, 4000, None, None, None, 1.0, 10.0, steady_minute_s=2.0)
    assert no_raw.steady_minute_ratio is None


def test_cpu_of_the_process_tree_counts_a_grandchild_that_exited() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("CPU accounting reads /proc (Linux)")
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    # A child (as Spark's Python daemon) whose own child spins ~0.3 s of CPU and is reaped.
    child_code = (
        f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {spin!r}])\n"
        "print('ready', flush=True)\ntime.sleep(30)"
    )
    # Measured from a fresh process: the test's own (a pytest-xdist worker) may still own the
    # JVM of an earlier Spark test, whose CPU is not this tree's.
    measure = (
        "import json, subprocess, sys\n"
        "from bench.cpu_tree import cpu_split\n"
        "before = cpu_split()\n"
        f"child = [sys.executable, '-c', {child_code!r}]\n"
        "with subprocess.Popen(child, stdout=subprocess.PIPE) as c:\n"
        "    try:\n"
        "        assert c.stdout is not None and c.stdout.readline().strip() == b'ready'\n"
        "        spent = cpu_split() - before\n"
        "    finally:\n"
        "        c.kill()\n"
        "print(json.dumps([spent.jvm_s, spent.python_workers_s]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", measure], cwd=ROOT, capture_output=True, text=True, check=True
    )
    jvm_s, python_workers_s = json.loads(out.stdout.strip().splitlines()[-1])
    assert jvm_s == 0
    assert python_workers_s >= 0.25


def test_warm_batches_leave_out_those_starting_within_the_warm_up() -> None:
    from bench.pipeline import warm_batches

    # batch 0 read nothing; 1 is the first data batch; 2..5 follow it.
    durations = {0: 5.0, 1: 10.0, 2: 20.0, 3: 30.0, 4: 1.0, 5: 2.0}
    later = [2, 3, 4, 5]
    assert warm_batches(later, durations, first=1, warmup_s=0.0) == later
    # 2 starts 10 s after 1 did, 3 at 30 s, 4 at 60 s, 5 at 61 s.
    assert warm_batches(later, durations, first=1, warmup_s=10.0) == later
    assert warm_batches(later, durations, first=1, warmup_s=10.5) == [3, 4, 5]
    assert warm_batches(later, durations, first=1, warmup_s=60.0) == [4, 5]
    assert warm_batches(later, durations, first=1, warmup_s=61.5) == []
    # only the batches asked about, however long the others took
    assert warm_batches([2, 5], durations, first=1, warmup_s=30.0) == [5]


def test_the_sustained_rate_stops_before_the_batch_of_the_last_event() -> None:
    from bench.pipeline import before_the_last_event

    # Batch 4 read the event far ahead (so did 5, in another partition); 6 read none.
    newest = {1: 100, 2: 200, 3: 300, 4: 10**12, 5: 10**12, 6: 0}
    assert before_the_last_event([2, 3, 4, 5, 6], newest) == [2, 3]
    assert before_the_last_event([2, 3], {2: 0, 3: 0}) == [2, 3]  # no event read at all


def test_a_reused_topic_is_named_after_the_shape_of_its_data() -> None:
    from bench.pipeline import messages_of, parse_args, shaped_topic

    base = ["--bootstrap", "127.0.0.1:9092", "--reuse-topic", "--events", "1001"]
    single, envelopes = parse_args(base), parse_args([*base, "--envelope", "100"])
    # One message an event, or envelopes of 100 (the last one short); then the tick.
    assert (messages_of(single), messages_of(envelopes)) == (1002, 12)
    open_end = parse_args([*base, "--no-close-windows"])
    assert messages_of(open_end) == 1001
    json_envelopes = parse_args([*base, "--envelope", "100", "--envelope-format", "json"])
    assert (envelopes.envelope_format, json_envelopes.envelope_format) == ("arrow", "json")
    names = {shaped_topic(a) for a in (single, envelopes, open_end, json_envelopes)}
    names.add(shaped_topic(parse_args([*base, "--compression", "gzip"])))
    assert len(names) == 5  # every argument that changes the data changes the name
    # One event per message is JSON whatever the format says: the same data.
    assert shaped_topic(parse_args([*base, "--envelope-format", "json"])) == shaped_topic(single)
    # What only changes how the job runs reads the same data.
    assert shaped_topic(parse_args([*base, "--max-offsets-per-trigger", "7"])) == shaped_topic(
        single
    )
    with pytest.raises(SystemExit):  # the embedded broker lives for one run
        parse_args(["--reuse-topic"])


def test_the_slide_check_is_the_short_setting_at_500k_topics() -> None:
    from bench.pipeline import parse_args

    check = parse_args(["--slide-check"])
    shape = (check.events, check.topics, check.envelope, check.max_offsets_per_trigger)
    assert shape == (4_000_000, 500_000, 100, 5_000)
    assert check.warmup_s == 30
    # What follows still applies: a broker of one's own, the topic produced once.
    reused = parse_args(["--slide-check", "--bootstrap", "127.0.0.1:9092", "--reuse-topic"])
    assert (reused.bootstrap, reused.reuse_topic, reused.events) == ("127.0.0.1:9092", True, 4e6)


def test_collector_memory_smoke() -> None:
    _, result = run_bench("collector_memory", "--topics", "2000", "--brokers", "1", "2")
    assert result["envelope_format"] == "arrow"  # what the collector sends by default
    runs = result["runs"]
    assert [(r["topics"], r["brokers"], r["events"]) for r in runs] == [
        (2000, 1, 2000),
        (2000, 2, 4000),
    ]
    assert all(r["failed"] == 0 and r["peak_mib"] >= r["baseline_mib"] for r in runs)


@pytest.mark.e2e
@pytest.mark.spark
def test_slow_cluster_smoke() -> None:
    # One pair of real runs (about two minutes): the figures are not checked, the shape is.
    _, result = run_bench(
        "slow_cluster", "--rounds", "1", "--window-s", "4", "--east-latency-s", "30",
        timeout_s=900,
    )  # fmt: skip
    runs = result["runs"]
    assert [r["east_latency_s"] for r in runs] == [0.0, 30.0]
    assert all(r["exit_code"] == 0 and r["time_to_split_s"] > 0 for r in runs)
    assert set(result["medians"]) == {"west_polls_per_minute", "time_to_split_s"}


def test_the_replay_bench_records_the_same_events_in_arrow_and_json() -> None:
    from bench.replay import messages

    arrow = list(messages(30, 2, 60, 7, "arrow"))
    json_ = list(messages(30, 2, 60, 7, "json"))
    assert [(m.key, m.offset) for m in arrow] == [(m.key, m.offset) for m in json_]
    assert sum(is_arrow_envelope(m.value) for m in arrow) == len(arrow) - 2  # 2 markers
    assert [parse_message(m.value) for m in arrow if is_arrow_envelope(m.value)] == [
        parse_message(m.value) for m in json_ if not is_round_marker(m.value)
    ]


def test_the_replay_bench_turns_its_hot_namespaces_busier_from_onsets_spread_over_it() -> None:
    from bench.replay import HOT_FACTOR, hot_onsets, messages

    # 4 of 10 namespaces, onsets spread over 100 rounds from round 1
    assert hot_onsets(10, 4, 100) == {0: 1, 2: 25, 5: 50, 7: 75}
    assert hot_onsets(2, 5, 10) == {0: 1, 1: 5}  # no more hot namespaces than namespaces
    assert hot_onsets(10, 0, 100) == {}

    def rates(hot: int) -> dict[tuple[int, str], float]:
        out: dict[tuple[int, str], float] = {}
        for m in messages(2_000, 3, 60, 500, "json", hot_namespaces=hot):
            if not is_round_marker(m.value):
                for e in parse_message(m.value):
                    out[(e.timestamp_ms, e.topic)] = e.msgRateIn + e.msgRateOut
        return out

    cold, hot = rates(0), rates(2)  # ns-0 hot from round 1, ns-1 from round 1 + 2 // 2 = 2
    assert cold.keys() == hot.keys() and len(cold) == 6_000
    for (at, topic), rate in hot.items():
        ns = int(topic.split("/ns-")[1].split("/")[0])
        r = (at - min(t for t, _ in cold)) // 60_000
        busier = (ns == 0 and r >= 1) or (ns == 1 and r >= 2)
        assert rate == pytest.approx(cold[(at, topic)] * (HOT_FACTOR if busier else 1.0))


def test_the_replay_bench_load_reports_carry_their_bundles_topics_rates() -> None:
    # A replay corrects a broker's cpu by the msg rate moved at the report's cpu over its msg
    # rate: a report must carry what its bundles' topics carried that round.
    from balancer.core.bundles import NamespaceBundles
    from balancer.core.hashing import hash_position
    from bench.replay import CPU_COLD_PCT, CPU_IDLE_PCT, contexts, messages

    topics, rounds = 2_000, 4
    carried: dict[tuple[int, str], list[float]] = {}  # (round ms, bundle key) -> in, out, ...
    for m in messages(topics, rounds, 60, 500, "json", hot_namespaces=1):
        if is_round_marker(m.value):
            continue
        for e in parse_message(m.value):
            assert not isinstance(e, Rejection)
            ns = e.topic.removeprefix("persistent://").rsplit("/", 1)[0]
            bundle = NamespaceBundles.initial(ns, 4).find(hash_position(e.topic)).key(ns)
            sums = carried.setdefault((e.timestamp_ms - 5, bundle), [0.0, 0.0, 0.0, 0.0, 0])
            sums[0] += e.msgRateIn
            sums[1] += e.msgRateOut
            sums[2] += e.msgThroughputIn
            sums[3] += e.msgThroughputOut
            sums[4] += 1
    reported = list(contexts(topics, rounds, 60, hot_namespaces=1))
    assert len(reported) == rounds
    cpu_per_msg: list[float] = []
    for context in reported:
        assert sorted(b for r in context.reports for b in r.bundles) == sorted(
            b for at, b in carried if at == context.round_ms
        )
        for report in context.reports:
            owned = [carried[(context.round_ms, b)] for b in report.bundles]
            assert report.msg_rate_in == pytest.approx(sum(c[0] for c in owned))
            assert report.msg_rate_out == pytest.approx(sum(c[1] for c in owned))
            assert report.msg_throughput_in == pytest.approx(sum(c[2] for c in owned))
            assert report.msg_throughput_out == pytest.approx(sum(c[3] for c in owned))
            assert report.num_topics == sum(c[4] for c in owned)
            cpu = next(iter(report.resources.values())).usage
            rate = report.msg_rate_in + report.msg_rate_out
            cpu_per_msg.append((cpu - CPU_IDLE_PCT) / rate)
            if context.round_ms == reported[0].round_ms:  # before the onset: about cold
                assert cpu == pytest.approx(CPU_COLD_PCT, rel=0.1)
    # one cost per msg/s, every broker, every round (the cpu is rounded to 0.001 %)
    assert max(cpu_per_msg) == pytest.approx(min(cpu_per_msg), rel=1e-4)


@pytest.mark.spark
def test_replay_bench_with_a_hot_namespace_makes_every_policy_act(tmp_path: Path) -> None:
    # One namespace of 1,000 topics, hot from round 1: its four bundles over max_msg_rate.
    # From a recording directory: the load reports Pulsar's shedders read come from its files.
    _, result = run_bench(
        "replay", "--topics", "1000", "--rounds", "5", "--hot-namespaces", "1",
        "--rounds-per-batch", "2", "--recording-dir", str(tmp_path / "rec"), timeout_s=600,
    )  # fmt: skip
    assert result["hot_namespaces"] == 1
    assert set(result["actions"]) == {"ours", *PULSAR_POLICIES}
    assert all(count > 0 for count in result["actions"].values()), result["actions"]


@pytest.mark.spark
def test_replay_on_a_tiny_recording() -> None:
    # 200 topics, 4 rounds of 60 s: 3 windows close (the last needs a later batch).
    out, result = run_bench(
        "replay", "--topics", "200", "--rounds", "4", "--envelope", "50",
        "--rounds-per-batch", "2", timeout_s=600,
    )  # fmt: skip
    assert result["samples"] == 800 and result["envelope_format"] == "arrow"
    assert result["windows"] >= 3
    assert result["batches"] >= 2
    assert result["driver_peak_rss_mib"] > 0
    assert "at this rate, 144M samples" in out
    # where the time went: the stream, the windows' decoding and building, every policy
    assert {"stream", "decode", "windows", "observe", "ours"} <= set(result["phases_s"])
    assert {"pulsar-modular-threshold", "pulsar-extensible-transfer"} <= set(result["phases_s"])
    # Each window some topic reported in took its bundle partials from the stage's closes or
    # from a job of its own: the stage's exactly when the stage had the layouts `ours`
    # handled it with and the window was the newest its batch closed (the stage rolls that
    # close up only); the first has no layouts for the stage yet.
    assert result["ours_reported_windows"] == result["windows"]
    assert result["ours_stage_partials_windows"] == result["ours_stage_rolled_windows"]
    assert (
        result["ours_partials_jobs"] + result["ours_stage_partials_windows"]
        == result["ours_reported_windows"]
    )
    assert 1 <= result["ours_stage_partials_windows"] < result["ours_reported_windows"]
    assert result["ours_stage_rolled_windows"] <= result["ours_stage_layouts_windows"]


def test_replay_stream_only_measures_the_stream_and_its_steady_rate() -> None:
    # One round a batch: from the second batch's first window on, whole windows of 200.
    out, result = run_bench(
        "replay", "--topics", "200", "--rounds", "6", "--envelope", "50",
        "--rounds-per-batch", "1", "--stream-only", timeout_s=600,
    )  # fmt: skip
    assert result["samples"] == 1200
    assert result["actions"] == {}  # no policy ran
    assert result["ours_reported_windows"] == 0
    assert result["batches"] >= 4
    assert 0 < result["steady_samples"] < result["samples"]
    assert result["steady_samples"] % 200 == 0
    assert result["steady_samples_per_s"] > 0
    assert "first window, then the steady rate, a day's writing shared by" in out
    # The files are written beside the stream, a file a round here, in a query run or more.
    assert result["files"] == 6 and 1 <= result["query_runs"] <= result["files"]
    assert {"write_files_s", "write_files_cpu_s", "write_files_cpu_s_per_round"} <= set(result)
    assert "a day's writing (720,000 rounds)" in out


@pytest.mark.spark
def test_replay_codecs_measures_every_codec() -> None:
    _, result = run_bench(
        "replay_codecs", "--topics", "200", "--rounds", "2", "--envelope", "50",
        "--rounds-per-batch", "1", "--repeats", "1", timeout_s=600,
    )  # fmt: skip
    codecs = result["codecs"]
    assert set(codecs) == {"zstd", "lz4", "snappy", "none"}
    assert codecs["none"]["mib"] >= codecs["zstd"]["mib"]
    assert all(c["read_cpu_s_per_round"] > 0 for c in codecs.values())


def test_replay_policies_on_tiny_windows_splits_moves_and_is_repeatable() -> None:
    # Busy namespaces (every 2nd, 10x) make Pulsar's policies split and move; the digest of
    # their actions and samples is the same run after run (what an A/B compares).
    args = ("replay_policies", "--topics", "3000", "--windows", "3", "--hot", "2")
    _, first = run_bench(*args, timeout_s=300)
    _, second = run_bench(*args, timeout_s=300)
    assert first["actions"] > 0
    assert first["digest"] == second["digest"]
    assert set(first["per_window_s"]) == {
        "windows",
        "pulsar-modular-threshold",
        "pulsar-modular-uniform",
        "pulsar-extensible-transfer",
    }


@pytest.mark.spark
def test_replay_reads_its_recording_from_a_directory_as_record_writes_one(
    tmp_path: Path,
) -> None:
    """`--recording-dir`: the recording written once as `record` writes its stats, then read
    back by the writer beside the stream (the reading counted, not left out as generation);
    a directory holding another recording is refused before Spark starts."""
    from balancer.app.replay.recording import ContextCounts, parse_contexts
    from balancer.app.replay.recording_dir import read_messages
    from bench.replay import contexts, messages

    where = tmp_path / "rec"
    args = ("--topics", "200", "--rounds", "4", "--envelope", "50", "--rounds-per-batch", "2")
    _, result = run_bench(
        "replay", *args, "--stream-only", "--recording-dir", str(where), timeout_s=600
    )
    assert result["samples"] == 800 and result["recording_dir"] == str(where)
    assert result["generation_cpu_s"] == 0.0 and "read_recording_cpu_s" in result
    held = json.loads((where / "bench-recording.json").read_text())
    on_disk = list(read_messages(where / "stats", held["files"]))
    assert [(m.key, m.value) for m in on_disk] == [
        (m.key, m.value) for m in messages(200, 4, 60, 50, "arrow")
    ]
    # the load reports too, as the context topic's records (`record`'s context/)
    counted = ContextCounts()
    read_back = list(
        parse_contexts(read_messages(where / "context", held["context_files"]), counted)
    )
    assert read_back == list(contexts(200, 4, 60)) and counted.given == 4 and not counted.rejected
    refused = subprocess.run(
        [sys.executable, "-m", "bench.replay", "--topics", "300", "--rounds", "4",
         "--recording-dir", str(where)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert refused.returncode != 0 and "holds another recording" in refused.stderr
