"""`pulsar-balancer reset-watermark --config FILE`: the way out of a poisoned checkpoint.

A checkpoint whose event-time watermark is far in the future (an event stamped ahead of the
clock) makes every event late; `run` refuses to start on it. This command sets the stored
watermark of the checkpoint's latest batch back to none, keeping the source offsets and the
windows' state, so the stream resumes where it stopped. Stop the balancer first.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from balancer.app.config import load_config

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "reset-watermark"


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="reset a checkpoint's event-time watermark, keeping its offsets",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="balancer config: its spark.checkpoint_dir")
    where.add_argument("--checkpoint-dir", type=Path, help="the checkpoint directory itself")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from streaming.spark.checkpoint import reset_watermark, stored_watermark

    checkpoint = (
        args.checkpoint_dir
        if args.checkpoint_dir is not None
        else load_config(args.config).spark.checkpoint_dir
    )
    before = stored_watermark(checkpoint)
    if before is None:
        raise ValueError(f"checkpoint {checkpoint}: no offset log (nothing to reset)")
    reset_watermark(checkpoint)
    print(
        f"checkpoint {checkpoint}: watermark of batch {before.batch_id} reset "
        f"(was {before.watermark_ms} ms); offsets and state kept"
    )
    return 0
