"""`zkledger`: the command line. Each command lives in `zkledger/commands/<name>.py` (see that package).

Exit codes: 0 ok, 1 bad input / failed check (`error: <one line>` on stderr), 2 usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from conf.settings import SettingsError, load_settings
from zkledger.commands import register_all
from zkledger.context import Context
from zkledger.errors import UserError

log = logging.getLogger(__name__)


def global_options(*, suppress_defaults: bool) -> argparse.ArgumentParser:
    """The options every command accepts (before or after its name).

    After the command name the defaults are suppressed so they do not overwrite values given before it.
    """
    default = argparse.SUPPRESS if suppress_defaults else None
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("global options")
    group.add_argument("--conf", metavar="FILE", default=default,
                       help="TOML settings merged over the defaults in conf/base.toml")
    group.add_argument("--lake", metavar="DIR", default=default, help="root folder of the Delta tables (./lake)")
    group.add_argument("--cluster", metavar="NAME", default=default, help="cluster name stored on every row (local)")
    group.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS if suppress_defaults else 0,
                       help="more logging on stderr (-v info, -vv debug)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zkledger",
        description="Metadata event sourcing for ZooKeeper-mode Kafka clusters: collect ZooKeeper and controller "
        "history into Delta tables, rebuild the state machines with Spark, and report anomalies.",
        parents=[global_options(suppress_defaults=False)],
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_all(subparsers, [global_options(suppress_defaults=True)])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 with usage on bad syntax, 0 on --help
    _configure_logging(args.verbose)
    from pipelines.parallel import use_system_allocator

    use_system_allocator()
    ctx: Context | None = None
    try:
        settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
        ctx = Context(settings)
        result = args.handler(args, ctx)
        summary, code = result if isinstance(result, tuple) else (result, 0)
        print(summary, flush=True)
        return int(code)
    except (UserError, SettingsError) as exc:
        log.debug("command failed", exc_info=True)
        print(f"error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)  # leave the terminal on a fresh line after ^C
        return 130
    finally:
        if ctx is not None:
            _close(ctx)


def _close(ctx: Context) -> None:
    try:
        ctx.close()
    except Exception:  # shutting Spark down must not hide the command's own outcome
        log.debug("error while stopping Spark", exc_info=True)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbosity < 2:
        # py4j and kazoo are chatty at INFO; keep them to warnings unless -vv
        for noisy in ("py4j", "kazoo"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
