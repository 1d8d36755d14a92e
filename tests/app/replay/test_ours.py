"""`ours` steps `run`'s own handler on closed windows: it splits a hot bundle after the hit
count, in its own layout, with the boundaries `run`'s split code chooses, and moves load off
an overloaded broker to the idle one; event time is its clock (no wall clock)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from balancer.app.config import BalancerConfig
from balancer.app.replay.engine import run_replay
from balancer.app.replay.ours import OursPolicy, corrected_report, cpu_costs
from balancer.app.replay.windows import ClosedWindow, StreamCounts
from balancer.core.broker_load import BrokerLoadReport, Resource, ResourceUsage
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.result import ActionKind
from tests.streaming.local_stage import LocalStage
from tests.streaming.rollup_reference import TopicWindow

NS = "t/ns"
BASE_MS = 1_700_000_040_000
MIN = 60_000
INITIAL = NamespaceBundles.initial(NS, 4)


ARCHIVE = f"persistent://{NS}/archive"


def topics() -> list[TopicLoad]:
    """40 topics; those of the first bundle carry 1,000 msg/s each (over its limit); and an
    archive topic of 12 GiB, over the 10 GiB offload threshold."""
    out = [TopicLoad(ARCHIVE, hash_position(ARCHIVE), storage_size=12 << 30)]
    for i in range(40):
        name = f"persistent://{NS}/t{i}"
        position = hash_position(name)
        hot = INITIAL.find(position) == INITIAL.bundles[0]
        rate = 1_000.0 if hot else 10.0
        out.append(TopicLoad(name, position, msg_rate_in=rate, msg_rate_out=rate,
                             producer_count=1, consumer_count=1))  # fmt: skip
    return out


def windows(count: int) -> list[ClosedWindow]:
    stage = LocalStage(window_ms=MIN, slide_ms=MIN, known_ttl_ms=3 * MIN)
    out = []
    for k in range(1, count + 1):
        end = BASE_MS + k * MIN
        rows = stage.close(
            (hash_position(t.topic) % 4, TopicWindow("c1", NS, end, t)) for t in topics()
        )
        out.append(ClosedWindow(end, rows))
    return out


def report(broker: str, bundles: list[str], at_ms: int, cpu: float) -> BrokerLoadReport:
    return BrokerLoadReport(
        cluster="c1", broker=broker, timestamp_ms=at_ms,
        resources={Resource.CPU: ResourceUsage(cpu, 100.0)}, bundles=tuple(bundles),
        msg_rate_in=1000.0, msg_rate_out=1000.0,
    )  # fmt: skip


def contexts(count: int) -> list[RoundContext]:
    names = [b.key(NS) for b in INITIAL.bundles]
    out = []
    for k in range(0, count + 1):
        at = BASE_MS + k * MIN
        out.append(RoundContext("c1", at, (
            report("b1:8080", names, at, 95.0),
            report("b2:8080", [], at, 5.0),
        )))  # fmt: skip
    return out


def config(tmp_path: Path, **moves: object) -> BalancerConfig:
    return BalancerConfig.model_validate(
        {
            "clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:9"}],
            "thresholds": {"defaults": {"max_msg_rate": 20_000}},
            "detection": {"hit_count_threshold": 3, "cooldown_s": 60},
            "moves": {"enabled": True, **moves},
            "offload": {"default_threshold": "10G"},
            "controller": {
                "journal_path": str(tmp_path / "j"),
                "audit_log_path": str(tmp_path / "a"),
            },
        }
    )


def test_ours_splits_the_hot_bundle_on_the_third_window_and_moves_off_the_hot_broker(
    tmp_path: Path,
) -> None:
    ours = OursPolicy(config(tmp_path), workdir=tmp_path / "ours")
    result = run_replay(
        source="test", windows=windows(5), contexts=contexts(6), policies=[ours],
        counts=StreamCounts(), window_s=60,
    )  # fmt: skip
    (run,) = result.runs
    splits = [a for a in run.actions if a.kind is ActionKind.SPLIT]
    assert splits, run.actions
    first = splits[0]
    assert first.subject == INITIAL.bundles[0].key(NS)
    # the third window over the limit (hit count 3), handled half a slide after its end
    assert first.at_ms == BASE_MS + 3 * MIN + 30_000
    assert len(first.children) >= 2
    layout = ours.layout.layouts[("c1", NS)]
    for child in first.children:
        assert layout.has(BundleRange.parse(child))
    moves = [a for a in run.actions if a.kind is ActionKind.MOVE]
    assert moves and all(
        (m.source_broker, m.destination_broker) == ("b1:8080", "b2:8080") for m in moves
    )
    for m in moves:  # each moved bundle is owned by its destination in ours' layout
        assert ours.layout.owners[("c1", m.subject)] == "b2:8080" or any(
            s.subject == m.subject for s in splits
        )
    assert [w.window_end_ms for w in run.windows] == [BASE_MS + k * MIN for k in range(1, 6)]
    # the offload, followed to SUCCESS (ours' Pulsar offloads at once), recorded once
    offloads = [a for a in run.actions if a.kind is ActionKind.OFFLOAD]
    assert [a.subject for a in offloads] == [ARCHIVE]


def test_a_report_is_corrected_only_for_the_bundles_whose_owner_differs() -> None:
    rep = report("b1:8080", ["t/ns/0x00000000_0x40000000", "t/ns/0x40000000_0x80000000"], 0, 50.0)
    owned = frozenset({"t/ns/0x00000000_0x40000000"})
    assert corrected_report(rep, frozenset(rep.bundles), {}) is rep
    moved = BundleLoad("c1", NS, BundleRange.parse("0x40000000_0x80000000"), 0,
                       msg_rate_in=500.0, msg_rate_out=500.0)  # fmt: skip
    loads = {"t/ns/0x40000000_0x80000000": moved}
    idle = replace(report("b2:8080", [], 0, 5.0), msg_rate_in=0.0, msg_rate_out=0.0)
    costs = cpu_costs([rep, idle])  # b2 carried nothing
    assert costs == {"b1:8080": 50.0 / 2000.0, "": 50.0 / 2000.0}
    after = corrected_report(rep, owned, loads, costs=costs)
    assert after.bundles == ("t/ns/0x00000000_0x40000000",)
    assert (after.msg_rate_in, after.msg_rate_out) == (500.0, 500.0)
    assert after.resources[Resource.CPU].usage == 25.0  # its 1,000 msg/s at its own cost
    # the broker that owned nothing gains them at the cost of the broker that carried them
    gained = corrected_report(
        idle, frozenset(loads), loads, recorded_owners={"t/ns/0x40000000_0x80000000": "b1:8080"},
        costs=costs,
    )  # fmt: skip
    assert gained.resources[Resource.CPU].usage == 5.0 + 25.0


def test_ours_corrects_a_report_by_the_same_rule_as_the_pulsar_policies_layout() -> None:
    """One rule (`balancer.core.replay.correction`): a bundle moved from b1 to the idle b3
    gives, in `ours`' corrected reports, exactly the resources the core layout gives them."""
    from balancer.core.replay.layout import ReplayLayout
    from tests.core.replay.fixtures import CLUSTER, recorded, topic, window_of

    ns = NamespaceBundles.initial(NS, 2)
    low, high = (b.key(NS) for b in ns.bundles)
    loads = [topic(f"{NS}/x{i}", msg_in=100.0 + i, bytes_in=1e5 * (i + 1)) for i in range(30)]
    ctx, seen = recorded({low: "b1:8080", high: "b2:8080"}, [ns], loads, brokers=["b3:8080"])
    window = window_of(ctx, seen)
    layout = ReplayLayout.from_contexts([ctx])
    layout.apply_move(CLUSTER, low, "b3:8080")
    views = layout.broker_loads(window)
    bundle_loads = {b.bundle.key(b.namespace): b for b in layout.bundle_loads(window)}
    owners = {name: r.broker for r in ctx.reports for name in r.bundles}
    costs = cpu_costs(ctx.reports)
    for rep in ctx.reports:
        owned = frozenset(layout.bundles_of(CLUSTER, rep.broker))
        fixed = corrected_report(rep, owned, bundle_loads, recorded_owners=owners, costs=costs)
        view = views[(CLUSTER, rep.broker)]
        assert fixed.resources == view.resources, rep.broker
        assert fixed.msg_rate_in + fixed.msg_rate_out == view.msg_rate
        assert (fixed.msg_throughput_in, fixed.msg_throughput_out) == (
            view.throughput_in,
            view.throughput_out,
        )
    assert views[(CLUSTER, "b3:8080")].resources != next(
        r.resources for r in ctx.reports if r.broker == "b3:8080"
    )


def test_ours_reads_the_partials_the_stage_rolled_up_with_its_layouts_and_decides_the_same(
    tmp_path: Path,
) -> None:
    """As `run`: the stream's stage rolls each window's closes up with the layouts `ours`
    handled the previous window with (`stage_layouts`), and `ours` reads those partials
    while they are still in force (not after its split): the same actions and windows as
    computing every window's partials itself, with fewer partials jobs of its own."""
    from collections.abc import Iterator

    from streaming.stage.partials import stage_roll_up

    def staged(ours: OursPolicy, count: int) -> Iterator[ClosedWindow]:
        stage = LocalStage(window_ms=MIN, slide_ms=MIN, known_ttl_ms=3 * MIN)
        for k in range(1, count + 1):
            end = BASE_MS + k * MIN
            layouts = ours.stage_layouts()  # asked as the window's batch starts
            rows = stage.close(
                ((hash_position(t.topic) % 4, TopicWindow("c1", NS, end, t)) for t in topics()),
                stage_roll_up(layouts) if layouts is not None else None,
            )
            yield ClosedWindow(end, rows, stage_layouts=layouts)

    runs = []
    jobs = []
    for with_stage in (False, True):
        work = tmp_path / str(with_stage)
        ours = OursPolicy(config(work), workdir=work / "ours")
        result = run_replay(
            source="test", windows=staged(ours, 6) if with_stage else windows(6),
            contexts=contexts(7), policies=[ours], counts=StreamCounts(), window_s=60,
        )  # fmt: skip
        runs.append(result.runs[0])
        jobs.append(ours.processor.partials_jobs)
    plain, with_stage_run = runs
    assert [a.kind for a in plain.actions].count(ActionKind.SPLIT) >= 1
    assert with_stage_run.actions == plain.actions
    assert with_stage_run.windows == plain.windows
    assert jobs[0] == 6, jobs  # every window's partials computed by ours itself
    assert jobs[1] == 2, jobs  # the first window, and the one after its split


def test_ours_rolls_a_window_up_at_once_with_the_same_loads_as_bucket_by_bucket() -> None:
    """`ours` rolls a window's topics, decoded once for every policy, up in one pass rather
    than `run`'s pass a bucket: the same bundle loads to the last bit (exact sums, rates
    that plain float addition would round differently by grouping) and the same large
    topics in the same order; rows not grouped by bucket take the per-bucket path."""
    import random

    import pyarrow.compute as pc

    from balancer.app.replay.ours import MemoryClosedWindows
    from streaming.driver.rollup import large_topics_of, merge_partials

    rng = random.Random(44)

    def load(i: int) -> TopicLoad:
        name = f"persistent://{NS}/r{i}"
        return TopicLoad(name, hash_position(name),
                         msg_rate_in=rng.uniform(0, 1e4) * 10 ** rng.randint(-6, 6),
                         msg_rate_out=rng.random() / 3, msg_throughput_in=rng.uniform(0, 1e9),
                         msg_throughput_out=rng.uniform(0, 1e-3),
                         producer_count=rng.randint(0, 3),
                         storage_size=rng.choice([0, 11 << 30, 20 << 30]))  # fmt: skip

    loads = [load(i) for i in range(2_000)]
    # Closes in parts of 100 topics: several rows a bucket, as at 10M topics.
    stage = LocalStage(window_ms=MIN, slide_ms=MIN, known_ttl_ms=3 * MIN, part_rows=100)
    end = BASE_MS + MIN
    rows = stage.close((hash_position(t.topic) % 4, TopicWindow("c1", NS, end, t)) for t in loads)
    layouts = {("c1", NS): NamespaceBundles.initial(NS, 16)}
    known = {("c1", NS): 2_100}

    def rolled(closed: MemoryClosedWindows) -> tuple[list[BundleLoad], list[TopicLoad], set[int]]:
        partials = closed.partials(end, layouts, 10 << 30)
        bundles = merge_partials(partials, window_end_ms=end, namespace_known=known)
        large = large_topics_of(partials).column("topic").to_pylist()
        return bundles, large, set(pc.unique(partials.column("bucket")).to_pylist()) - {None}

    window = ClosedWindow(end, rows)
    per_bucket = rolled(MemoryClosedWindows(rows))
    at_once = rolled(MemoryClosedWindows(rows, topic_table=window.topic_table))
    assert len(set(rows.column("bucket").to_pylist())) == 4
    assert per_bucket[2] == {0, 1, 2, 3} and at_once[2] == {0}  # one pass over the window
    assert at_once[:2] == per_bucket[:2]
    assert len(per_bucket[0]) == 16 and len(per_bucket[1]) > 100
    # Buckets interleaved: the per-bucket path (its large topics come bucket by bucket).
    assert rows.num_rows > 8
    mixed = rows.take(sorted(range(rows.num_rows), key=lambda i: (i % 2, i)))
    shuffled = ClosedWindow(end, mixed)
    again = rolled(MemoryClosedWindows(mixed, topic_table=shuffled.topic_table))
    assert again[2] == {0, 1, 2, 3}
    assert again[0] == per_bucket[0]
