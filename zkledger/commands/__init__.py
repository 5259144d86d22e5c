"""CLI commands: one module per command, each exposing the same two functions.

```python
def register(subparsers) -> None   # add a parser with help text; parser.set_defaults(handler=run)
def run(args, ctx) -> str          # do the work; return the one-line summary the CLI prints last
```

`run` may also return `(summary, exit_code)` when the command's result decides the exit code (e.g. `check`
exits 1 when a suite fails). Raise `services.errors.UserError` for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable
from typing import Any

from zkledger.context import Context

log = logging.getLogger(__name__)

COMMANDS: tuple[str, ...] = (
    "demo", "zk", "simulate", "collect", "rebuild", "monitor", "state", "anomalies", "check", "report", "maintain",
    "migration", "kafka_lab",
)

Handler = Callable[[argparse.Namespace, Context], "str | tuple[str, int]"]


def register_all(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register every command module; a module that fails to import still gets a parser that explains why."""
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"zkledger.commands.{name}")
        except Exception as exc:  # one command whose imports fail (a broken package) must not take the CLI down
            log.debug("cannot import zkledger.commands.%s", name, exc_info=True)
            _register_broken(subparsers, name, exc, parents)
            continue
        _register_module(module, subparsers, parents)


def _register_module(module: Any, subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    # the global options (--lake, --conf, ...) are also accepted after the command's name, and after a
    # subcommand's (`collect txnlog ... --lake DIR`)
    original = subparsers.add_parser
    subparsers.add_parser = _adding_parents(original, parents)
    try:
        module.register(subparsers)
    finally:
        subparsers.add_parser = original


def _adding_parents(add_parser: Callable[..., argparse.ArgumentParser],
                    parents: list[argparse.ArgumentParser]) -> Callable[..., argparse.ArgumentParser]:
    """``add_parser`` giving each new parser, and each parser of its own subcommands, the global options."""

    def add(*args: Any, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("parents", parents)
        parser = add_parser(*args, **kwargs)
        add_subparsers = parser.add_subparsers

        def add_nested(**options: Any) -> Any:
            nested = add_subparsers(**options)
            nested.add_parser = _adding_parents(nested.add_parser, parents)  # type: ignore[method-assign]
            return nested

        parser.add_subparsers = add_nested  # type: ignore[method-assign]
        return parser

    return add


def _register_broken(
    subparsers: Any, name: str, exc: Exception, parents: list[argparse.ArgumentParser]
) -> None:
    from services.errors import UserError

    reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
    parser = subparsers.add_parser(name, parents=parents, help=f"(unavailable: {reason})")

    def run(args: argparse.Namespace, ctx: Context) -> str:
        raise UserError(f"zkledger {name}: cannot load the command ({reason})")

    parser.set_defaults(handler=run)
