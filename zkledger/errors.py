"""Errors the CLI turns into a one-line message instead of a traceback."""

from __future__ import annotations

from conf.settings import SettingsError

__all__ = ["NotImplementedYet", "SettingsError", "UserError", "ZooKeeperServerError"]


class UserError(Exception):
    """Bad input or an environment problem the user can fix; `cli` prints `error: <msg>` and exits 1."""


class ZooKeeperServerError(UserError):
    """The embedded ZooKeeper could not be started, found or stopped."""


class NotImplementedYet(Exception):
    """A command whose implementation has not landed yet; `cli` exits 2 with one line."""

    def __init__(self, command: str, issue: int) -> None:
        super().__init__(f"zkledger {command}: not implemented yet (tracked in issue {issue})")
        self.command = command
        self.issue = issue
