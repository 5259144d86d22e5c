"""The command line of the spark-submit jobs: the CLI's global options, then each job's own."""

from __future__ import annotations

import argparse


def job_parser(description: str) -> argparse.ArgumentParser:
    """A job's parser holding --conf/--lake/--cluster, as `zkledger`'s global options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--conf", metavar="FILE", default=None,
                        help="TOML settings merged over the defaults in conf/base.toml")
    parser.add_argument("--lake", metavar="DIR", default=None, help="root folder of the Delta tables (./lake)")
    parser.add_argument("--cluster", metavar="NAME", default=None, help="cluster name stored on every row (local)")
    return parser
