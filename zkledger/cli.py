"""`zkledger`: the command line. Each command lives in `zkledger/commands/<name>.py` (see that package).

Exit codes: 0 ok, 1 bad input / failed check (`error: <one line>` on stderr), 2 usage error, 130 interrupted.

The process ends with ``os._exit`` once the command is done (see :func:`exit_process`): Arrow's and
delta-rs' native thread pools race the C++ static destructors that run in the C runtime's ``exit``
(apache/arrow#34314, delta-rs#2184), which aborted about one finished command in eight with SIGABRT (134).
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from conf.settings import SettingsError, load_settings
from services.errors import UserError, lake_problem, path_problem
from services.sanitize import RedactingFilter, remember_credential, terminal_safe
from services.spark_session import spark_logs_to_file
from zkledger.commands import register_all
from zkledger.context import Context

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
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print zkledger's version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_all(subparsers, [global_options(suppress_defaults=True)])
    return parser


def version() -> str:
    """The installed distribution's version (pyproject.toml's `version`, the one place it is written)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("zkledger")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code.

    Without `argv` (the `zkledger` script, `python -m zkledger.cli`) this is the process's entry point: it
    reads ``sys.argv`` and ends the process itself (:func:`exit_process`), never returning.
    """
    if argv is None:
        exit_process(_entry(sys.argv[1:]))
    return run(argv)


def run(argv: Sequence[str]) -> int:
    """Parse `argv`, run the command, print its summary last; returns the exit code (in-process callers)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 with usage on bad syntax, 0 on --help
    _configure_logging(args.verbose)
    from pipelines.parallel import use_system_allocator

    use_system_allocator()
    ctx: Context | None = None
    try:
        settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
        remember_credential(settings.zookeeper.auth_credential)
        ctx = Context(settings)
        result = args.handler(args, ctx)
        summary, code = result if isinstance(result, tuple) else (result, 0)
        print(summary, flush=True)
        return int(code)
    except (UserError, SettingsError) as exc:
        return _fail(exc)
    except KeyboardInterrupt:
        print(file=sys.stderr)  # leave the terminal on a fresh line after ^C
        return 130
    except Exception as exc:
        # a damaged table or a bad path deep in a library: still one line (the traceback at -vv)
        problem = lake_problem(exc, ctx.lake_root if ctx is not None else None) or path_problem(exc)
        if problem is None:
            raise
        return _fail(problem)
    finally:
        if ctx is not None:
            _close(ctx)
        spark_logs_to_file(False)  # in-process callers (tests, benchmarks) build later sessions as before


def run_command(command: str, argv: Sequence[str] | None = None) -> int:
    """`run` of one command with its own arguments: what the `jobs/` entry points of `spark-submit` call, so a job
    and ``zkledger <command>`` are the same handler with the same options (`argv` defaults to ``sys.argv[1:]``)."""
    return _entry([command, *(sys.argv[1:] if argv is None else argv)])


def _entry(argv: Sequence[str]) -> int:
    """`run` with what would otherwise escape it (argparse's exits, an unexpected error) made an exit code."""
    try:
        return run(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `zkledger anomalies | head`: the reader left; end as quietly as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except BaseException:  # a bug: show the traceback as Python would, then leave like every other outcome
        traceback.print_exc()
        return 1


def exit_process(code: int) -> NoReturn:
    """End the process with `code` after Python's own exit work, skipping the C runtime's ``exit``.

    The atexit handlers run (logging is flushed, an embedded ZooKeeper started for the command is stopped,
    temporary folders are removed), then stdout and stderr are flushed, then ``os._exit``: no C++ static
    destructor runs while Arrow's or delta-rs' worker threads are still alive.
    """
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`zkledger anomalies | head`) or a closed stream
                pass
        os._exit(code)


def _fail(exc: BaseException) -> int:
    log.debug("command failed", exc_info=True)
    print(f"error: {_one_line(exc)}", file=sys.stderr, flush=True)
    return 1


def _close(ctx: Context) -> None:
    try:
        ctx.close()
    except Exception:  # shutting Spark down must not hide the command's own outcome
        log.debug("error while stopping Spark", exc_info=True)


def _one_line(exc: BaseException) -> str:
    text = terminal_safe(" ".join(str(exc).split()))
    return text or type(exc).__name__


def _configure_logging(verbosity: int) -> None:
    """Log to stderr (as `logging.basicConfig`: only when no handler is installed yet); every root handler
    redacts secrets (`services.sanitize.RedactingFilter`). Spark's own logs (its JVM's log4j2 lines, the JVM's
    and its Python workers' stderr) go to ``<lake>/_logs/spark.log``, or with -v to the terminal."""
    spark_logs_to_file(verbosity <= 0)
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    if verbosity < 2:
        # py4j and kazoo are chatty at INFO; keep them to warnings unless -vv
        for noisy in ("py4j", "kazoo"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
