"""Errors the CLI turns into a one-line message instead of a traceback."""

from __future__ import annotations

from conf.settings import SettingsError

__all__ = ["SettingsError", "UserError", "ZooKeeperServerError"]


class UserError(Exception):
    """Bad input or an environment problem the user can fix; `cli` prints `error: <msg>` and exits 1."""


class ZooKeeperServerError(UserError):
    """The embedded ZooKeeper could not be started, found or stopped."""


