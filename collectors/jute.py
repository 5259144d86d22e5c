"""Minimal reader for ZooKeeper's jute binary encoding (zookeeper-jute, BinaryInputArchive).

Big-endian ints/longs, booleans as one byte, buffers and strings as an int length (-1 = null)
followed by the bytes, vectors as an int count (-1 = null) followed by the items.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


class JuteError(ValueError):
    """The bytes do not hold the record we were asked to read (short or inconsistent)."""


@dataclass(frozen=True)
class Acl:
    perms: int
    scheme: str
    id: str


class JuteReader:
    """Sequential reader over one buffer; every read checks bounds and raises JuteError."""

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise JuteError(f"need {n} bytes at offset {self.pos}, have {self.remaining}")
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def read_int(self) -> int:
        return int(_INT.unpack(self._take(4))[0])

    def read_long(self) -> int:
        return int(_LONG.unpack(self._take(8))[0])

    def read_bool(self) -> bool:
        return self._take(1)[0] != 0

    def read_buffer(self) -> bytes | None:
        n = self.read_int()
        if n == -1:
            return None
        return bytes(self._take(n))

    def read_string(self) -> str | None:
        raw = self.read_buffer()
        return None if raw is None else raw.decode("utf-8")

    def read_path(self) -> str:
        """A string that must be present (znode paths)."""
        s = self.read_string()
        if s is None:
            raise JuteError(f"null path at offset {self.pos}")
        return s

    def read_vector(self, item: Callable[[JuteReader], T]) -> list[T]:
        n = self.read_int()
        if n == -1:
            return []
        if n < 0 or n > self.remaining:  # every item takes at least one byte
            raise JuteError(f"bad vector length {n} at offset {self.pos}")
        return [item(self) for _ in range(n)]

    def read_acl(self) -> Acl:
        perms = self.read_int()
        scheme = self.read_string() or ""
        ident = self.read_string() or ""
        return Acl(perms, scheme, ident)

    def read_acls(self) -> list[Acl]:
        return self.read_vector(JuteReader.read_acl)
