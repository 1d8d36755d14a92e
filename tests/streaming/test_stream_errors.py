"""streaming.spark.errors.root_cause: Spark's multi-line failure text -> the cause in one line.

The texts keep the structure of real failures (frames trimmed): a read task failing while
Kafka is down (seen in tests/kafka/test_kafka_outage.py), the latestOffset timeout
of issue 16, and (fixtures/stream_error_checkpoint_volume_full.txt) the text of
`str(query.exception())` of a real `pulsar-balancer run` whose checkpoint volume filled up
(a 4 MiB tmpfs filled to its last 12 KiB mid-run: the window state's commit failed in a task,
under foreachBatch's collect), with Java frames cut to three a block, the query plan to two
lines, and paths made neutral.
"""

from __future__ import annotations

from pathlib import Path

from streaming.spark.errors import MAX_CAUSE_CHARS, STATE_LAYOUT_HINT, root_cause

FIXTURES = Path(__file__).with_name("fixtures")

FOREACH_BATCH = """\
[STREAM_FAILED] Query pulsar-balancer-stream [id = a448fe01, runId = 90263ffa] terminated \
with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided \
function in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return \
Message: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/repo/streaming/batch.py", line 117, in __call__
    closed = batch_df.toArrow()  # runs the batch: scan, window state, observations
  File "/venv/lib/python3.11/site-packages/pyspark/errors/exceptions/captured.py", line 285, in x
    raise converted from None
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/repo/streaming/source.py", line 142, in consumer
    return KafkaConsumer(**kwargs)
  File "/venv/lib/python3.11/site-packages/kafka/net/manager.py", line 168, in _do_bootstrap
    raise Errors.KafkaTimeoutError(
kafka.errors.KafkaTimeoutError: KafkaTimeoutError: Unable to bootstrap from ['127.0.0.1:34035']
 SQLSTATE: 39000
\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(x.scala:60)
"""

LATEST_OFFSET = """\
[STREAM_FAILED] Query pulsar-balancer-stream [id = 1, runId = 2] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source \
perform latestOffset: Traceback (most recent call last):
  File "/repo/streaming/source.py", line 251, in latestOffset
    marks = self._target if self._target is not None else self._marks(begin)
  File "/repo/streaming/source.py", line 207, in fetch_high_watermarks
    raise TimeoutError(
TimeoutError: topic stats: no fetch response for partition(s) [0, 1] in 10.0 s
 SQLSTATE: 38000
\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.latestOffset
"""


def test_the_innermost_python_exception_of_a_nested_failure() -> None:
    assert root_cause(FOREACH_BATCH) == (
        "KafkaTimeoutError: Unable to bootstrap from ['127.0.0.1:34035']"
    )


def test_the_latest_offset_timeout_names_the_topic_and_partitions() -> None:
    assert root_cause(LATEST_OFFSET) == (
        "TimeoutError: topic stats: no fetch response for partition(s) [0, 1] in 10.0 s"
    )


def test_a_chained_traceback_reports_the_last_exception() -> None:
    text = (
        'Traceback (most recent call last):\n  File "a.py", line 1, in f\n'
        "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n"
        '\nTraceback (most recent call last):\n  File "a.py", line 3, in f\n'
        "ValueError: bad x\n"
    )
    assert root_cause(text) == "ValueError: bad x"


def test_a_java_failure_reports_its_last_cause() -> None:
    text = (
        "[STREAM_FAILED] Query q [id = 1, runId = 2] terminated with exception: Job aborted.\n"
        "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
        "Caused by: org.apache.spark.SparkException: stage failed\n"
        "Caused by: java.io.IOException: No space left on device\n"
        "\t... 12 more\n"
    )
    assert root_cause(text) == "IOException: No space left on device"


def test_a_plain_message_loses_only_the_query_prefix_and_stays_one_short_line() -> None:
    text = "[STREAM_FAILED] Query q [id = 1, runId = 2] terminated with exception: boom"
    assert root_cause(text) == "boom"
    long = root_cause("x" * 1000 + "\nsecond line")
    assert len(long) == MAX_CAUSE_CHARS and "\n" not in long


def test_a_checkpoint_of_another_state_layout_says_to_move_it_aside() -> None:
    # As Spark 4.3 failed on a checkpoint written before the state moved to bucket keys.
    text = (
        "[STREAM_FAILED] Query [id = 890011b7, runId = 6aee5cfc] terminated with exception: "
        "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing "
        "state key schema.\n\tat org.apache.spark.sql.execution.streaming.state."
        "StateStoreErrors$.stateStoreKeySchemaNotCompatible(StateStoreErrors.scala:164)"
    )
    cause = root_cause(text)
    assert cause.startswith("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE: ")
    assert STATE_LAYOUT_HINT in cause and "\n" not in cause


def test_a_full_checkpoint_volume_names_the_os_error_not_py4js_wrapper() -> None:
    """Issue 32: the batch's collect fails with Py4JJavaError ("... calling o452.getResult"),
    whose Java causes end in the OS's error."""
    text = (FIXTURES / "stream_error_checkpoint_volume_full.txt").read_text()
    assert root_cause(text) == "IOException: No space left on device"


def test_a_python_os_error_under_the_batch_function_is_the_cause() -> None:
    text = FOREACH_BATCH.replace(
        "kafka.errors.KafkaTimeoutError: KafkaTimeoutError: Unable to bootstrap from "
        "['127.0.0.1:34035']",
        "OSError: [Errno 28] No space left on device: '/var/lib/pulsar-balancer/reports'",
    )
    assert root_cause(text) == (
        "OSError: [Errno 28] No space left on device: '/var/lib/pulsar-balancer/reports'"
    )


def test_a_py4j_error_without_a_java_cause_is_reported_as_it_is() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/py4j/protocol.py", line 327, in x\n'
        "py4j.protocol.Py4JJavaError: An error occurred while calling o7.getResult.\n"
        ": java.lang.IllegalStateException: no result\n"
        "\tat org.apache.spark.security.SocketAuthServer.getResult(SocketAuthServer.scala:1)\n"
    )
    assert root_cause(text) == "IllegalStateException: no result"
