"""The `pulsar-balancer` command line: subcommands are loaded from COMMAND_MODULES.

Bad input (a `ValueError`, `OSError` or usage error) exits with code 2 and one line
`error: ...` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

# Each module has `register(subparsers) -> None` and sets `handler=` via set_defaults.
COMMAND_MODULES: tuple[str, ...] = (
    "balancer.app.commands.inspect",
    "balancer.app.commands.validate_config",
    "balancer.app.commands.simulate",
    "balancer.app.commands.run",
    "balancer.app.commands.collect",
    "balancer.app.commands.checkpoint",
    "balancer.app.commands.plan",
    "balancer.app.commands.apply",
    "balancer.app.commands.drain",
    "balancer.app.commands.roll",
    "balancer.app.commands.record",
    "balancer.app.commands.replay",
)

EXIT_USAGE = 2


class UsageError(Exception):
    """A command line argparse rejects; reported as one line, not usage plus error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pulsar-balancer",
        description="Streaming load-balancer for Apache Pulsar: inspect, simulate and run.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return handler(args)
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0
    except (UsageError, ValueError, OSError, LookupError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
