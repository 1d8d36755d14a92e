"""`pulsar-balancer plan` against the simulated peer group over real HTTP: proposals, exit
codes, read-only, offline from saved answers, and one-line errors for bad input."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from balancer.app.cli import main
from balancer.app.commands.plan import EXIT_ERROR, EXIT_NOTHING, EXIT_PROPOSALS
from balancer.sim import parse_scenario, start_peer_group
from balancer.sim.routes import ROUTES

GET_ROUTES = {name for method, _, name, _ in ROUTES if method == "GET"}
HOT = Path("conf/scenarios/hot-bundle.yaml")
GROWTH = Path("conf/scenarios/offload-growth.yaml")
E2E_SCENARIO = Path("tests/e2e/scenario.yaml")


def quiet_scenario() -> Any:
    return parse_scenario(
        {
            "name": "quiet",
            "seed": 3,
            "clusters": [{"name": "east"}],
            "namespaces": [
                {
                    "name": "acme/calm",
                    "cluster": "east",
                    "bundles": 4,
                    "topic_groups": [{"name": "t", "count": 20, "total_msg_rate_in": 100}],
                }
            ],
        }
    )


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", "--interval-s", "0", *args])
    out, err = capsys.readouterr()
    return code, out, err


def urls(group: Any) -> list[str]:
    return [f"--admin-url={name}={url}" for name, url in group.admin_urls.items()]


def write_config(tmp_path: Path, group: Any, **sections: Any) -> Path:
    data = {
        "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
        **sections,
    }
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_proposes_the_split_and_sends_only_gets(capsys: pytest.CaptureFixture[str]) -> None:
    with start_peer_group(HOT) as group:
        code, out, err = run_plan(capsys, *urls(group), "--samples", "3", "-o", "json")
        counted = dict(group.model.request_counts)
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    assert doc["exit_code"] == EXIT_PROPOSALS
    [split] = doc["splits"]
    assert split["namespace"] == "public/default"
    assert split["bundle"] == "0x00000000_0x40000000"
    assert split["reason"] == "MsgRate"
    assert len(split["children"]) == len(split["boundaries"]) + 1 >= 2
    assert all({"msg_rate", "throughput_bytes", "topics"} <= set(c) for c in split["children"])
    # Strictly read-only: every request the simulator saw is a GET route.
    assert counted and set(route for _, route in counted) <= GET_ROUTES
    # Three samples of each of the two brokers.
    assert sum(n for (_, route), n in counted.items() if route == "broker_stats") == 6


def test_plan_table_and_nothing_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    with start_peer_group(quiet_scenario()) as group:
        code, out, err = run_plan(capsys, *urls(group))
    assert code == EXIT_NOTHING, err
    assert "Nothing to do (exit code 0)" in out
    assert "0 over a limit" in out


def test_plan_shows_offload_with_its_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(GROWTH) as group:
        config = write_config(tmp_path, group, offload={"default_threshold": "1G"})
        code, out, err = run_plan(capsys, "--config", str(config), "-o", "json")
        counted = dict(group.model.request_counts)
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    [offload] = doc["offloads"]
    assert offload["topic"].startswith("persistent://public/archive/archive")
    assert offload["threshold_bytes"] == 1024**3
    point = offload["offload_point"]
    assert point is not None and point["entryId"] == 0 and point["ledgerId"] >= 0
    assert set(route for _, route in counted) <= GET_ROUTES
    assert counted[("standalone", "internal_stats")] >= 1


def test_a_topic_offloaded_down_to_its_threshold_is_no_longer_proposed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """broker-stats' storageSize still counts offloaded ledgers (Pulsar's getTotalSize): the
    plan must not propose the offload again once BookKeeper holds less than the threshold,
    just as `run` decides nothing for it (issue 12). The e2e scenario's archive topic grows
    slowly (100 KiB/s), so its offload brings it under the threshold for a while."""
    with start_peer_group(E2E_SCENARIO) as group:
        # 10 GiB + 100 MiB: the offload keeps 40 ledgers of 256 MiB (10 GiB) in BookKeeper,
        # and the topic's growth until the next plan stays far under the 100 MiB to spare.
        config = write_config(tmp_path, group, offload={"default_threshold": "10340M"})
        code, out, err = run_plan(capsys, "--config", str(config), "-o", "json")
        assert code == EXIT_PROPOSALS, err
        [offload] = json.loads(out)["offloads"]
        topic = offload["topic"].removeprefix("persistent://")
        answer = httpx.put(
            f"{group.admin_urls[offload['cluster']]}/admin/v2/persistent/{topic}/offload",
            json={**offload["offload_point"], "partitionIndex": -1},
            timeout=10,
        )
        assert answer.status_code == 204, answer.text
        group.clock.advance(21)  # the offload completes (offload_duration_s: 20)
        code, out, err = run_plan(capsys, "--config", str(config), "-o", "json")
        assert group.topic_stats(offload["topic"])["offloadedStorageSize"] > 0
    assert code == EXIT_PROPOSALS, err  # the hot bundles on west are still proposed
    assert json.loads(out)["offloads"] == []


def test_namespace_outside_the_allow_list_is_skipped_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(HOT) as group:
        config = write_config(tmp_path, group, controller={"allow_namespaces": ["other/*"]})
        code, out, err = run_plan(capsys, "--config", str(config), "-o", "json")
    assert code == EXIT_NOTHING, err
    doc = json.loads(out)
    assert doc["splits"] == []
    denied = [s for s in doc["skipped"] if s["reason"] == "denied"]
    assert [s["target"] for s in denied] == ["0x00000000_0x40000000"]
    assert "allow-list" in denied[0]["detail"]


def test_a_401_is_one_line_naming_the_cluster_and_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with start_peer_group(HOT, required_token="s3cret-token") as group:
        code, out, err = run_plan(capsys, *urls(group))
        url = group.admin_urls["standalone"]
    assert code == EXIT_ERROR
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "standalone" in lines[0] and url in lines[0] and "401" in lines[0]
    assert "Traceback" not in err


def test_an_unreachable_cluster_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run_plan(capsys, f"--admin-url=far=http://127.0.0.1:{port}")
    assert code == EXIT_ERROR
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "cluster far" in lines[0] and str(port) in lines[0]
    assert "Traceback" not in err


def save_answers(group: Any, directory: Path) -> None:
    for cluster, brokers in group.broker_urls.items():
        (directory / cluster).mkdir(parents=True)
        for i, url in enumerate(brokers):
            body = httpx.get(f"{url}/admin/v2/broker-stats/topics").text
            (directory / cluster / f"broker-{i}.json").write_text(body)


def test_stats_file_plan_matches_the_live_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(HOT) as group:
        save_answers(group, tmp_path / "saved")
        live_code, live_out, _ = run_plan(capsys, *urls(group), "--samples", "1", "-o", "json")
        before = dict(group.model.request_counts)
        code, out, err = run_plan(capsys, "--stats-file", str(tmp_path / "saved"), "-o", "json")
        assert dict(group.model.request_counts) == before  # offline: nothing asked
    assert code == live_code == EXIT_PROPOSALS, err

    def splits(doc: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
        return [(s["cluster"], s["bundle"], s["boundaries"]) for s in doc["splits"]]

    assert splits(json.loads(out)) == splits(json.loads(live_out)) != []


def test_one_saved_file_with_cluster_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(quiet_scenario()) as group:
        url = group.broker_urls["east"][0]
        path = tmp_path / "east.json"
        path.write_text(httpx.get(f"{url}/admin/v2/broker-stats/topics").text)
    code, out, err = run_plan(capsys, "--stats-file", str(path), "--cluster", "east")
    assert code == EXIT_NOTHING, err
    assert "20 bundles" not in out and "4 bundles with load" in out


def test_a_malformed_topic_entry_is_left_out_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(quiet_scenario()) as group:
        url = group.broker_urls["east"][0]
        body = httpx.get(f"{url}/admin/v2/broker-stats/topics").json()
    bundles = next(iter(body.values()))
    domains = next(iter(bundles.values()))
    bad = next(iter(domains["persistent"]))
    domains["persistent"][bad]["msgRateIn"] = "NaN"
    path = tmp_path / "east.json"
    path.write_text(json.dumps(body))
    code, out, err = run_plan(capsys, "--stats-file", str(path), "--cluster", "east")
    assert code == EXIT_NOTHING, err
    assert f"topic {bad} left out (wrong_type" in err or f"topic {bad} left out (not_finite" in err
    assert "4 bundles with load" in out  # the rest of the answer is planned


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"acme/ns": {"0x00000000_0x40000000": {"persistent": {', "not valid JSON"),
        ("[1, 2]", "not a broker-stats/topics answer"),
        ('{"acme/ns": {"not-a-bundle": {}}}', "not a broker-stats/topics answer"),
    ],
)
def test_a_bad_stats_file_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    path = tmp_path / "broker.json"
    path.write_text(content)
    code, _, err = run_plan(capsys, "--stats-file", str(path))
    assert code == EXIT_ERROR
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and expected in lines[0]


def test_a_missing_stats_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_plan(capsys, "--stats-file", str(tmp_path / "nope"))
    assert code == EXIT_ERROR and "nope" in err and "Traceback" not in err


def test_lone_hot_partition_is_shown_with_its_remedy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = [{"namespace": "public/*", "max_msg_rate": 12000}]
    with start_peer_group(HOT) as group:
        config = write_config(tmp_path, group, thresholds={"overrides": overrides})
        code, out, err = run_plan(capsys, "--config", str(config), "-o", "json")
    assert code == EXIT_PROPOSALS, err
    [hot] = json.loads(out)["lone_hot_topics"]
    assert hot["hot_topic"] == "persistent://public/default/orders-partition-5"
    assert hot["topic"] == "persistent://public/default/orders"
    assert hot["current_partitions"] == 32
    assert hot["msg_rate"] > 12000
    # The 32 partitions together are far under 32 x 9,600 msg/s: the load is uneven.
    assert hot["recommended_partitions"] == 32 and hot["skewed"] is True


def test_samples_are_taken_interval_apart_and_averaged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from balancer.app.cli import build_parser
    from balancer.app.commands.plan import plan_command

    slept: list[float] = []
    with start_peer_group(HOT, time_scale=0) as group:

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            group.clock.advance(seconds)  # simulated time moves between the samples

        args = build_parser().parse_args(
            ["plan", *urls(group), "--samples", "3", "--interval-s", "45", "-o", "json"]
        )
        code = plan_command(args, sleep=sleep)
        counted = dict(group.model.request_counts)
    assert code == EXIT_PROPOSALS
    assert slept == [45.0, 45.0]
    assert sum(n for (_, route), n in counted.items() if route == "broker_stats") == 6
    out, err = capsys.readouterr()
    assert json.loads(out)["splits"]
    assert "sample 2 of 3 taken; the next in 45 s" in err


def test_offload_reads_go_to_the_cluster_the_stats_came_from(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """west listed first (the entry cluster); the offload candidate lives on east. Pulsar
    answers internalStats and offload status locally, with no 307: the plan must ask east."""
    with start_peer_group(E2E_SCENARIO) as group:
        order = [f"--admin-url={c}={group.admin_urls[c]}" for c in ("west", "east")]
        code, out, err = run_plan(capsys, *order, "-o", "json")
        asked = dict(group.model.request_counts)
    assert code == EXIT_PROPOSALS, err
    [offload] = json.loads(out)["offloads"]
    assert offload["cluster"] == "east" and offload["offload_point"] is not None
    assert asked.get(("east", "internal_stats"), 0) >= 1
    assert asked.get(("west", "internal_stats"), 0) == 0
