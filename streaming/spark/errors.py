"""The root cause of a streaming query's failure, in one line.

A query that fails in Python code (the Kafka source, the foreachBatch step) reports a
Py4J/Spark error whose first line is Spark's wrapper ("... perform latestOffset: Traceback
(most recent call last):") and whose cause is the last line of the innermost Python
traceback, tens of lines further down. When that Python exception is only Py4J's wrapper of
a JVM failure (a batch's collect failing with "Py4JJavaError: An error occurred while calling
o452.getResult."), the cause is the JVM's: the deepest `Caused by:` of the Java exception
Py4J quotes (e.g. "java.io.IOException: No space left on device" under Spark's state store
and Hadoop's wrappers). Purely computational.
"""

from __future__ import annotations

import re

MAX_CAUSE_CHARS = 300
_TRACEBACK = "Traceback (most recent call last):"
# A Python exception line: `[package.]Name[: message]`, at the start of a line.
_PY_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?::\s?(.*))?$")
_CAUSED_BY = re.compile(r"^Caused by: (?:[\w$]+\.)*([\w$]+)(?::\s?(.*))?$")
# Py4J quotes the Java exception on the line after its own: ": java.lang.Class: message".
_PY4J_JAVA = re.compile(r"^: (?:[\w$]+\.)*([\w$]+)(?::\s?(.*))?$")
# Python exceptions that only wrap a JVM failure, whose cause is in the Java text after them.
_PY4J_WRAPPERS = frozenset({"Py4JJavaError"})
_QUERY_PREFIX = re.compile(r"^\[STREAM_FAILED\] Query .*? terminated with exception: ")
# Spark's error classes for a checkpoint whose state another layout wrote: say what to do.
_STATE_LAYOUT = re.compile(r"\[(STATE_STORE_(?:KEY|VALUE)_SCHEMA_NOT_COMPATIBLE)\]")
STATE_LAYOUT_HINT = (
    "the checkpoint's window state was written with another layout (an older release?): "
    "move spark.checkpoint_dir aside and start again (docs/runbook.md)"
)


def root_cause(error_text: str) -> str:
    """`Class: message` of the innermost Python exception, else of the last Java cause."""
    layout = _STATE_LAYOUT.search(error_text)
    if layout:
        return _clip(f"{layout.group(1)}: {STATE_LAYOUT_HINT}")
    lines = error_text.splitlines()
    for index in reversed([i for i, line in enumerate(lines) if line.endswith(_TRACEBACK)]):
        found = _exception_after(lines, index + 1)
        if found is None:
            continue
        text, name, at = found
        if name in _PY4J_WRAPPERS:
            text = _java_cause(lines[at + 1 :]) or text
        return _clip(text)
    java = _java_cause(lines)
    if java is not None:
        return _clip(java)
    first = lines[0] if lines else error_text
    return _clip(_QUERY_PREFIX.sub("", first).strip() or "unknown error")


def _exception_after(lines: list[str], start: int) -> tuple[str, str | None, int] | None:
    """The exception that ends the traceback whose frames begin at `start`: its text, its
    class name (None: not a `Class: message` line) and its line's index."""
    for at in range(start, len(lines)):
        line = lines[at]
        if not line.strip() or line[0].isspace():
            continue  # frames and source lines are indented
        if line.startswith(("During handling", "The above exception")):
            return None  # a chained traceback follows; the caller looks at that one
        match = _PY_EXCEPTION.match(line.strip())
        if match is None:
            return line.strip(), None, at
        return _name_message(match.group(1), match.group(2)), match.group(1), at
    return None


def _java_cause(lines: list[str]) -> str | None:
    """`Class: message` of the deepest Java cause in `lines`: the last `Caused by:`, else
    the exception Py4J quotes (": Class: message"); None when there is neither."""
    quoted = None
    for line in reversed(lines):
        match = _CAUSED_BY.match(line.strip())
        if match:
            return _name_message(match.group(1), match.group(2))
        quoted = _PY4J_JAVA.match(line) or quoted  # the first, Py4J's own
    return None if quoted is None else _name_message(quoted.group(1), quoted.group(2))


def _name_message(name: str, message: str | None) -> str:
    message = (message or "").strip()
    # kafka-python repeats the class in its messages ("KafkaTimeoutError: KafkaTimeoutError: x").
    if message.startswith(f"{name}: "):
        message = message[len(name) + 2 :]
    return f"{name}: {message}" if message else name


def _clip(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= MAX_CAUSE_CHARS else one_line[: MAX_CAUSE_CHARS - 3] + "..."
