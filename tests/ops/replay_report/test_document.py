"""The JSON report: every figure, a version, and the result reading back exactly."""

from __future__ import annotations

import dataclasses
import json
import re
import typing

import pytest

from balancer.core.replay.result import ActionKind, ReplayAction, ReplayResult, WindowSample
from balancer.ops.replay_report import ReplayReportError, ReportDocument, from_json, to_json
from balancer.ops.replay_report.document import VERSION, to_document
from tests.ops.replay_report.samples import T0, day_result, small_result


def with_odd_fields(result: ReplayResult) -> ReplayResult:
    """Fields the samples leave at their defaults: gaps, unnamed brokers, integral loads."""
    first = result.runs[0]
    odd = dataclasses.replace(
        first,
        actions=(
            *first.actions,
            ReplayAction(at_ms=T0, cluster="east", kind=ActionKind.MOVE, subject="t/n/0x0_0x1"),
        ),
        windows=(
            *first.windows,
            WindowSample(window_end_ms=T0 + 7 * 60_000, broker_load={"east/b1": 1.0}),
        ),
    )
    return dataclasses.replace(result, runs=(odd, *result.runs[1:]), gaps_ms=((T0, T0 + 60_000),))


@pytest.mark.parametrize(
    "make", [small_result, day_result, lambda: with_odd_fields(small_result())]
)
def test_the_result_reads_back_exactly(make: typing.Callable[[], ReplayResult]) -> None:
    result = make()
    assert from_json(to_json(result)) == result


def test_the_document_holds_every_figure_worked_out_by_hand() -> None:
    doc = json.loads(to_json(small_result()))
    assert (doc["schema"], doc["version"]) == ("pulsar-balancer/replay-report", VERSION)
    ours, pulsar = doc["summary"]["policies"]
    assert (ours["policy"], ours["splits"], ours["moves"], ours["offloads"]) == ("ours", 1, 1, 0)
    assert (pulsar["splits"], pulsar["moves"], pulsar["offloads"]) == (0, 1, 1)
    assert (ours["sessions_moved"], pulsar["sessions_moved"]) == (40, 120)
    assert (ours["broker_minutes_over"], pulsar["broker_minutes_over"]) == (2.0, 4.0)
    assert (ours["bundle_minutes_over"], pulsar["bundle_minutes_over"]) == (2.0, 4.0)
    # ours split the hot bundle 60 s after it went over; Pulsar moved it after 180 s.
    assert ours["bundle_reaction"]["median_time_to_action_s"] == 60.0
    assert pulsar["bundle_reaction"]["max_time_to_action_s"] == 180.0
    assert pulsar["broker_reaction"] == {
        "overloads": 1,
        "acted_on": 1,
        "never_acted_on": 0,
        "median_time_to_action_s": 180.0,
        "max_time_to_action_s": 180.0,
    }
    (overload,) = [o for o in pulsar["overloads"] if o["subject_kind"] == "broker"]
    assert overload == {
        "subject_kind": "broker",
        "subject": "east/b1",
        "start_ms": T0 + 2 * 60_000,
        "last_ms": T0 + 5 * 60_000,
        "recovered_ms": T0 + 6 * 60_000,
        "peak": 0.95,
        "first_action_ms": T0 + 5 * 60_000,
        "time_to_action_s": 180.0,
    }
    (hour,) = doc["summary"]["top_hours"]
    assert (hour["hour_start_ms"], hour["score"]) == (T0, 4.0)


def _check_keys(value: object, hint: object, where: str) -> None:
    """Every object of the document has exactly its TypedDict's keys, recursively."""
    if typing.is_typeddict(hint):
        assert isinstance(value, dict), where
        hints = typing.get_type_hints(hint)
        assert set(value) == set(hints), where
        for key, sub in hints.items():
            _check_keys(value[key], sub, f"{where}.{key}")
    elif typing.get_origin(hint) is list:
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _check_keys(item, typing.get_args(hint)[0], f"{where}[{i}]")


def test_the_document_has_exactly_its_typed_keys() -> None:
    _check_keys(json.loads(to_json(with_odd_fields(small_result()))), ReportDocument, "doc")
    assert to_document(small_result())["summary"]["policies"][0]["policy"] == "ours"


def _doc() -> dict[str, typing.Any]:
    return typing.cast(dict[str, typing.Any], json.loads(to_json(small_result())))


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda d: d.update(version=99), "version 99 is not supported"),
        (lambda d: d.update(schema="other"), "not a replay report"),
        (lambda d: d["result"].update(window_s="60"), "result.window_s: expected an integer"),
        (lambda d: d["result"].update(topics=True), "result.topics: expected an integer"),
        (
            lambda d: d["result"]["runs"][1]["actions"][0].update(kind="drain"),
            "result.runs[1].actions[0].kind: 'drain' is not one of split, move, offload",
        ),
        (
            lambda d: d["result"]["runs"][0]["windows"][2]["broker_load"].update(
                {"east/b1": "hot"}
            ),
            "result.runs[0].windows[2].broker_load.east/b1: expected a number",
        ),
        (
            lambda d: d["result"].update(gaps_ms=[[1]]),
            "result.gaps_ms[0]: expected [first_ms, last_ms]",
        ),
        (lambda d: d["result"].update(runs={}), "result.runs: expected a list"),
    ],
)
def test_a_bad_document_is_an_error_naming_the_field(
    spoil: typing.Callable[[dict[str, typing.Any]], None], message: str
) -> None:
    doc = _doc()
    spoil(doc)
    with pytest.raises(ReplayReportError, match=re.escape(message)):
        from_json(json.dumps(doc))


def test_not_json_is_an_error_too() -> None:
    with pytest.raises(ReplayReportError, match="not JSON"):
        from_json("{")
    with pytest.raises(ReplayReportError, match="document: expected an object"):
        from_json("[]")


def test_a_load_json_cannot_spell_is_refused_when_writing() -> None:
    run = small_result().runs[0]
    bad = dataclasses.replace(
        run, windows=(WindowSample(window_end_ms=T0, broker_load={"east/b1": float("nan")}),)
    )
    with pytest.raises(ValueError, match="not JSON compliant"):
        to_json(dataclasses.replace(small_result(), runs=(bad,)))
