"""The command line of the spark-submit jobs: the CLI's global options, then each job's own."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakehouse import Lake


def job_parser(description: str) -> argparse.ArgumentParser:
    """A job's parser holding --conf/--lake/--cluster, as `zkledger`'s global options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--conf", metavar="FILE", default=None,
                        help="TOML settings merged over the defaults in conf/base.toml")
    parser.add_argument("--lake", metavar="DIR", default=None, help="root folder of the Delta tables (./lake)")
    parser.add_argument("--cluster", metavar="NAME", default=None, help="cluster name stored on every row (local)")
    return parser


def job_context(args: argparse.Namespace) -> tuple[Any, Lake]:
    """Settings and the Lake for a job's parsed arguments."""
    from conf.settings import load_settings
    from lakehouse import Lake
    from pipelines.parallel import use_system_allocator

    use_system_allocator()
    settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
    return settings, Lake(settings.lake.root, settings.lake.cluster)
