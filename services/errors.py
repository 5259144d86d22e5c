"""Errors the CLI turns into a one-line message instead of a traceback."""

from __future__ import annotations

import os
import re
import sys

from conf.settings import SettingsError

__all__ = ["SettingsError", "UserError", "ZooKeeperServerError", "lake_problem", "path_problem"]


class UserError(Exception):
    """Bad input or an environment problem the user can fix; `cli` prints `error: <msg>` and exits 1."""


class ZooKeeperServerError(UserError):
    """The embedded ZooKeeper could not be started, found or stopped."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_COMMIT_FILE = re.compile(r'filename: "(\d+)\.json"')
_MESSAGE_MAX = 300
# OSErrors about a path the user gave (or a file the user removed): not bugs
_PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError)


def path_problem(exc: BaseException) -> UserError | None:
    """A one-line error for a missing, misplaced or unreadable path; None for anything else."""
    if isinstance(exc, _PATH_ERRORS) and exc.filename is not None and exc.strerror:
        return UserError(f"{exc.strerror}: {exc.filename}")
    return None


def lake_problem(exc: BaseException, lake_root: str | None) -> UserError | None:
    """A one-line error naming the damaged table when delta-rs or Arrow fail on the lake's files (a deleted
    `_delta_log` commit, a missing data file, a garbled log entry); None when `exc` is not such a failure."""
    if not _from_lake_readers(exc, lake_root):
        return None
    detail = _short(exc)
    where = f"the lake at {lake_root}" if lake_root else "the lake"
    damaged = _damaged_tables(lake_root, detail) if lake_root else []
    if damaged:
        where = f"table {', '.join(damaged)} in {where}"
    return UserError(f"cannot read {where}: {detail}")


def _from_lake_readers(exc: BaseException, lake_root: str | None) -> bool:
    # only modules already loaded can have raised it: importing deltalake here would cost the light commands
    if "deltalake" in sys.modules:
        from deltalake.exceptions import DeltaError, DeltaProtocolError, TableNotFoundError

        if isinstance(exc, DeltaError | DeltaProtocolError | TableNotFoundError):
            return True
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        if isinstance(exc, pa.ArrowException) and not isinstance(exc, pa.ArrowNotImplementedError):
            return True
    # Arrow re-raises a missing data file as a plain FileNotFoundError naming the file only in its message
    return isinstance(exc, OSError) and lake_root is not None and os.path.abspath(lake_root) + os.sep in str(exc)


def _short(exc: BaseException) -> str:
    """The failure's first line without terminal colours, a missing-commit gap said plainly, capped."""
    text = _ANSI.sub("", str(exc))
    if "found gap" in text:
        around = _COMMIT_FILE.findall(text)
        if len(around) >= 2:
            return (f"its _delta_log has no commit files between {around[0]}.json and {around[-1]}.json "
                    "(deleted or not yet copied)")
    first = " ".join(text.strip().splitlines()[0].split()) if text.strip() else type(exc).__name__
    return first if len(first) <= _MESSAGE_MAX else first[: _MESSAGE_MAX - 1] + "…"


def _damaged_tables(lake_root: str, detail: str) -> list[str]:
    """The tables the failure names by path, else the tables delta-rs cannot open."""
    root = os.path.abspath(lake_root)
    named = sorted({part.split(os.sep)[0] for part in re.findall(re.escape(root + os.sep) + r"([^\s'\"]+)", detail)})
    if named:
        return named
    try:
        folders = sorted(e.name for e in os.scandir(root) if os.path.isdir(os.path.join(e.path, "_delta_log")))
    except OSError:
        return []
    from deltalake import DeltaTable

    broken = []
    for name in folders:
        try:
            DeltaTable(os.path.join(root, name))
        except Exception:
            broken.append(name)
    return broken
