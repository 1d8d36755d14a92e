"""`pulsar-balancer validate-config FILE`: load and validate a config file, print what it means.

Exit 0 when valid (the masked effective config is printed with --show), 2 with one line per
bad key otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from balancer.config import ConfigError, load_config

NAME = "validate-config"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="validate a balancer config file",
        description="Load a YAML config, validate every key and report problems by key path.",
    )
    parser.add_argument("file", type=Path, help="the YAML config file")
    parser.add_argument(
        "--show", action="store_true", help="print the effective config (secrets masked) as JSON"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
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
