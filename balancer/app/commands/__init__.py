"""CLI subcommands: each module has `register(subparsers)` and sets `handler=` on its parser.

`balancer.app.cli.COMMAND_MODULES` lists the modules to load. A handler takes the parsed
arguments and returns the exit code; it raises `ValueError` (or `OSError`) for bad input, which
the entry point turns into a one-line `error: ...` and exit code 2.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from balancer.support.yamlfile import read_text

if TYPE_CHECKING:
    import argparse

    # What `register` is given (argparse's action is generic only in its type stubs).
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def read_input(path: str) -> str:
    """The text of a file, or of stdin for `-` (UTF-8)."""
    if path == "-":
        return sys.stdin.read()
    return read_text(path)
