"""Command output: a readable rich table by default, exactly one JSON document with
`--output json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from enum import StrEnum

from rich.console import Console, RenderableType
from rich.table import Table

# Width used when stdout is not a terminal (pipes, tests), so rows are not folded.
_PIPE_WIDTH = 200


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=[f.value for f in OutputFormat],
        default=OutputFormat.TABLE.value,
        help="table (default, for people) or json (exactly one JSON document, for programs)",
    )


def wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "output", OutputFormat.TABLE) == OutputFormat.JSON)


def print_json(document: object) -> None:
    """One JSON document on stdout (NaN/Infinity refused: they are not JSON)."""
    sys.stdout.write(json.dumps(document, indent=2, allow_nan=False) + "\n")


def make_table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]]
) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    return table


def print_tables(*renderables: RenderableType) -> None:
    """Rich renderables (tables, lines of text) on stdout."""
    console = Console(
        file=sys.stdout,
        width=None if sys.stdout.isatty() else _PIPE_WIDTH,
        highlight=False,
        soft_wrap=False,
    )
    for renderable in renderables:
        console.print(renderable)


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def non_negative(text: str) -> float:
    """argparse type: a number >= 0 (NaN refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value
