"""`pulsar-balancer simulate` as a real process: prints the admin URLs, serves them, moves
simulated time with the wall clock, and stops cleanly on SIGTERM / SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "conf" / "scenarios" / "three-cluster-peers.yaml"


def start(*extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "balancer.app.cli", "simulate", "--scenario", str(SCENARIO), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def admin_urls(proc: subprocess.Popen[str], clusters: int) -> dict[str, str]:
    assert proc.stdout is not None
    urls: dict[str, str] = {}
    while len(urls) < clusters:
        line = proc.stdout.readline()
        assert line, f"simulator exited early: {proc.stderr.read() if proc.stderr else ''}"
        parts = line.split()
        if parts[:1] == ["cluster"]:
            urls[parts[1]] = parts[3]
    return urls


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_serves_until_signalled(sig: signal.Signals) -> None:
    proc = start("--time-scale", "600", "--seed", "8")
    try:
        urls = admin_urls(proc, 3)
        assert set(urls) == {"east", "west", "south"}
        with httpx.Client(timeout=5.0) as http:
            assert http.get(f"{urls['east']}/admin/v2/clusters").json() == [
                "east",
                "south",
                "west",
            ]
            first = http.get(f"{urls['east']}/sim/v1/clock").json()["elapsed_s"]
            split = "/admin/v2/namespaces/acme/west-ns/0x00000000_0x40000000/split"
            r = http.put(f"{urls['east']}{split}", json=[])
            assert r.status_code == 307 and r.headers["location"].startswith(urls["west"])
            second = http.get(f"{urls['east']}/sim/v1/clock").json()["elapsed_s"]
            assert second > first  # simulated time follows the wall clock, scaled
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_duration_stops_by_itself() -> None:
    proc = start("--duration-s", "0.2")
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.count("cluster ") == 3 and "stopped" in out


def test_bad_scenario_is_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nclusters: [{name: a, brokers: 0}]\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "balancer.app.cli", "simulate", "--scenario", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "clusters.0.brokers" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_fault_options_reach_the_served_clusters() -> None:
    proc = start(
        "--time-scale",
        "0",
        "--down",
        "south",
        "--redirect-loop-rate",
        "1",
        "--fault-cluster",
        "west",
        "--fault-path",
        "/split",
    )
    try:
        urls = admin_urls(proc, 3)
        split = "/admin/v2/namespaces/acme/west-ns/0x00000000_0x40000000/split"
        with httpx.Client(timeout=5.0) as http:
            looped = http.put(f"{urls['west']}{split}", json=[])
            assert looped.status_code == 307 and looped.headers["location"] == urls["west"] + split
            # Other paths and clusters are untouched; the down cluster answers nothing.
            assert http.get(f"{urls['west']}/admin/v2/clusters").status_code == 200
            assert http.put(f"{urls['east']}{split}", json=[]).status_code == 307
            with pytest.raises(httpx.TransportError):
                http.get(f"{urls['south']}/admin/v2/clusters")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--error-rate-503", "1.5"), "--error-rate-503 must be in [0, 1], got 1.5"),
        (("--latency-s", "-1"), "--latency-s must be >= 0"),
        (("--down", "mars"), "unknown cluster 'mars'"),
    ],
    ids=["rate", "latency", "cluster"],
)
def test_bad_fault_options_are_one_error_line(args: tuple[str, ...], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "balancer.app.cli", "simulate", "--scenario", str(SCENARIO), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1
