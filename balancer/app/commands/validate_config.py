"""`pulsar-balancer validate-config FILE`: check a config as `run` would, print what it means.

The file (every key, and the rules between keys), then this machine: the files it names
exist, the state directories can be written, the environment variables are set, the metrics
address is this host's (`balancer.app.preflight`; nothing is created). `--schema-only` checks
the file alone, for a config meant for another machine. Exit 0 when valid (the masked
effective config is printed with --show), 2 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from balancer.app.config import ConfigError, load_config
from balancer.app.preflight import check_environment

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "validate-config"


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="validate a balancer config file",
        description="Load a YAML config, validate every key, check what `run` needs from "
        "this machine (files, directories, environment variables, the metrics address), and "
        "report each problem by key path. Nothing is created or started.",
    )
    parser.add_argument("file", type=Path, help="the YAML config file")
    parser.add_argument(
        "--schema-only",
        action="store_true",
        help="check the file alone, not this machine (for a config meant for another host)",
    )
    parser.add_argument(
        "--show", action="store_true", help="print the effective config (secrets masked) as JSON"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
        if not args.schema_only:
            check_environment(config, source=str(args.file))
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(
        f"{args.file}: valid ({len(config.clusters)} cluster(s), mode {config.controller.mode}, "
        f"{len(config.thresholds.overrides)} namespace override(s))"
    )
    if args.show:
        print(json.dumps(config.as_dict(), indent=2, sort_keys=True))
    return 0
