from balancer.controller.broker_board import BrokerLoadBoard, BrokerSample
from balancer.core.broker_load import BrokerLoadReport


def _report(broker: str, at_ms: int) -> BrokerLoadReport:
    return BrokerLoadReport(cluster="c", broker=broker, timestamp_ms=at_ms, resources={})


def _sample(
    broker: str, at_ms: int, *, report: bool = True, owned: tuple[str, ...] = ()
) -> BrokerSample:
    return BrokerSample(
        cluster="c",
        broker=broker,
        poll_ms=at_ms,
        report=_report(broker, at_ms) if report else None,
        owned_bundles=frozenset(owned),
    )


def test_a_window_holds_the_reports_inside_it_and_the_newest_ownership() -> None:
    board = BrokerLoadBoard(retain_ms=600_000)
    for at_ms in (10_000, 70_000, 130_000, 190_000):
        board.record(_sample("a:1", at_ms, owned=(f"t/ns/{at_ms}",)))
    [window] = board.window("c", start_ms=60_000, end_ms=180_000)
    assert [r.timestamp_ms for r in window.reports] == [70_000, 130_000]
    assert window.owned_bundles == {"t/ns/190000"}
    assert window.last_poll_ms == 190_000


def test_a_broker_without_a_report_in_the_window_keeps_its_newest_earlier_one() -> None:
    board = BrokerLoadBoard(retain_ms=600_000)
    board.record(_sample("a:1", 10_000))
    board.record(_sample("a:1", 100_000, report=False))
    [window] = board.window("c", start_ms=60_000, end_ms=180_000)
    assert [r.timestamp_ms for r in window.reports] == [10_000]


def test_brokers_not_polled_since_the_window_started_and_old_samples_are_gone() -> None:
    board = BrokerLoadBoard(retain_ms=100_000)
    board.record(_sample("old:1", 10_000))
    board.record(_sample("a:1", 10_000))
    board.record(_sample("a:1", 200_000))
    assert [w.broker for w in board.window("c", start_ms=60_000, end_ms=180_000)] == ["a:1"]
    [window] = board.window("c", start_ms=0, end_ms=300_000)  # old:1 aged out
    assert window.broker == "a:1"
    assert [r.timestamp_ms for r in window.reports] == [200_000]  # 10_000 aged out
    board.forget("c", ["a:1"])
    assert board.clusters() == ["c"]
    board.forget("c", [])
    assert board.clusters() == []
