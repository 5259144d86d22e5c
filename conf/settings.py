"""Typed, validated settings: `conf/base.toml`, overlaid by a user file, overridden by CLI flags.

Usage::

    settings = load_settings("prod.toml", lake="/data/lake", cluster="prod-1")
    settings.spark.shuffle_partitions  # -> int, already validated

Every problem raises `SettingsError` with one line naming the dotted key, e.g.
``conf: spark.shuffle_partitions must be a positive integer, got 'x'``.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

BASE_TOML = Path(__file__).with_name("base.toml")
T = TypeVar("T")


class SettingsError(ValueError):
    """A configuration problem; the message is one line that names the key."""


@dataclass(frozen=True)
class LakeSettings:
    root: str
    cluster: str


@dataclass(frozen=True)
class TlsSettings:
    use_ssl: bool
    certfile: str
    keyfile: str
    ca: str
    verify: bool


@dataclass(frozen=True)
class ZooKeeperSettings:
    hosts: str
    chroot: str
    session_timeout_s: float
    auth_scheme: str
    auth_credential: str
    tls: TlsSettings

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's `auth_data` argument (empty when no auth is configured)."""
        return [(self.auth_scheme, self.auth_credential)] if self.auth_scheme else []


class LocalCompiler(StrEnum):
    """The JIT compilers of a local session's JVM (``spark.local_compiler``)."""

    C1 = "c1"
    """C1 alone: compiles quickly; a local session's work is mostly in its Python workers."""
    C2 = "c2"
    """The JVM's default tiers: C1, then C2 for the hottest code."""


@dataclass(frozen=True)
class SparkSettings:
    master: str
    app_name: str
    shuffle_partitions: int
    log_level: str
    local_compiler: str
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamingSettings:
    checkpoint_root: str
    trigger_seconds: float
    max_files_per_trigger: int


@dataclass(frozen=True)
class PipelineSettings:
    buckets: int
    offline_blip_ms: int
    rebuild_batch_mb: int


@dataclass(frozen=True)
class CollectSettings:
    batch_size: int
    flush_seconds: float
    poll_seconds: float


@dataclass(frozen=True)
class MonitorSettings:
    webhook: str
    quality_each_batch: bool
    maintain_every_hours: float
    table_commit_seconds: float


@dataclass(frozen=True)
class MetricsSettings:
    port: int
    host: str
    stale_seconds: float
    ready_seconds: float


@dataclass(frozen=True)
class DemoSettings:
    zk_port: int
    scenario: str
    kafka_version: str
    seed: int
    report: str


@dataclass(frozen=True)
class Settings:
    lake: LakeSettings
    zookeeper: ZooKeeperSettings
    spark: SparkSettings
    streaming: StreamingSettings
    pipeline: PipelineSettings
    collect: CollectSettings
    monitor: MonitorSettings
    metrics: MetricsSettings
    demo: DemoSettings


# --- value checks beyond the type: dotted key -> (predicate, what is expected) ---------------------------------
_LOG_LEVELS = frozenset({"ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE"})
Check = tuple[Callable[[Any], bool], str]
_CHECKS: Mapping[str, Check] = MappingProxyType({
    "lake.root": (lambda v: v != "", "a non-empty path"),
    "lake.cluster": (lambda v: v != "" and "/" not in v, "a non-empty name without '/'"),
    "zookeeper.hosts": (lambda v: _valid_hosts(v), "a comma-separated list of host:port"),
    "zookeeper.chroot": (lambda v: v == "" or (v.startswith("/") and not v.endswith("/")),
                         "empty or an absolute path like '/kafka'"),
    "zookeeper.session_timeout_s": (lambda v: v > 0, "a positive number"),
    "zookeeper.auth_scheme": (lambda v: v in ("", "digest"), "'' or 'digest'"),
    "spark.master": (lambda v: v != "", "a Spark master URL like 'local[2]'"),
    "spark.app_name": (lambda v: v != "", "a non-empty name"),
    "spark.shuffle_partitions": (lambda v: v > 0, "a positive integer"),
    "spark.log_level": (lambda v: v.upper() in _LOG_LEVELS, "one of " + ", ".join(sorted(_LOG_LEVELS))),
    "spark.local_compiler": (lambda v: v in set(LocalCompiler), " or ".join(repr(str(c)) for c in LocalCompiler)),
    "streaming.trigger_seconds": (lambda v: v > 0, "a positive number"),
    "streaming.max_files_per_trigger": (lambda v: v > 0, "a positive integer"),
    "pipeline.buckets": (lambda v: v > 0, "a positive integer"),
    "pipeline.offline_blip_ms": (lambda v: v >= 0, "a non-negative number of milliseconds"),
    "pipeline.rebuild_batch_mb": (lambda v: v >= 0, "a non-negative number of megabytes (0 = no cap)"),
    "collect.batch_size": (lambda v: v > 0, "a positive integer"),
    "collect.flush_seconds": (lambda v: v > 0, "a positive number"),
    "collect.poll_seconds": (lambda v: v > 0, "a positive number"),
    "monitor.webhook": (lambda v: v == "" or v.startswith(("http://", "https://")), "empty or an http(s) URL"),
    "monitor.maintain_every_hours": (lambda v: v >= 0, "a non-negative number (0 = off)"),
    "monitor.table_commit_seconds": (lambda v: v >= 0, "a non-negative number (0 = in every micro-batch)"),
    "metrics.port": (lambda v: 0 <= v <= 65535, "a port number (0 = off)"),
    "metrics.host": (lambda v: v != "" and "/" not in v, "a host name or address to listen on"),
    "metrics.stale_seconds": (lambda v: v > 0, "a positive number"),
    "metrics.ready_seconds": (lambda v: v > 0, "a positive number"),
    "demo.zk_port": (lambda v: 0 <= v <= 65535, "a port number (0 = any free port)"),
    "demo.seed": (lambda v: v >= 0, "a non-negative integer"),
})

_TYPE_WORDS: Mapping[type, str] = MappingProxyType({
    str: "a string", int: "an integer", float: "a number", bool: "true or false",
})


def _valid_hosts(value: str) -> bool:
    for part in value.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not (host and sep and port.isdigit() and 0 < int(port) < 65536):
            return False
    return True


def load_settings(
    conf_file: str | Path | None = None,
    *,
    lake: str | None = None,
    cluster: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build Settings from base.toml, an optional overlay file, and overrides (dotted keys like "spark.master")."""
    raw = _read_base()
    if conf_file is not None:
        raw = deep_merge(raw, _read_toml(Path(conf_file)))
    flat: dict[str, Any] = dict(overrides or {})
    if lake is not None:
        flat["lake.root"] = lake
    if cluster is not None:
        flat["lake.cluster"] = cluster
    for dotted, value in flat.items():
        raw = deep_merge(raw, _nest(dotted, value))
    settings = _build(Settings, raw, "")
    return _resolve_defaults(settings)


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: overlay's tables merge into base's tables; any other overlay value replaces base's."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    cursor = nested
    *parents, leaf = dotted.split(".")
    for part in parents:
        cursor = cursor.setdefault(part, {})
    cursor[leaf] = value
    return nested


def _read_base() -> dict[str, Any]:
    """The defaults, read as package data so they load from a --py-files zip too."""
    import importlib.resources

    try:
        return tomllib.loads(importlib.resources.files("conf").joinpath("base.toml").read_text("utf-8"))
    except FileNotFoundError:
        return _read_toml(BASE_TOML)  # gives the one-line error naming the path


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"conf: file not found: {path}") from None
    except IsADirectoryError:
        raise SettingsError(f"conf: not a file: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"conf: {path} is not valid TOML: {exc}") from None


def _build(cls: type[T], raw: Any, prefix: str) -> T:
    """Check `raw` against dataclass `cls` (types, unknown keys, value checks) and instantiate it."""
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, Mapping):
        raise SettingsError(f"conf: {where} must be a table, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in raw:
        if key not in names:
            raise SettingsError(f"conf: unknown key {prefix}{key} (known: {', '.join(sorted(names))})")
    values: dict[str, Any] = {}
    for name in names:
        dotted = prefix + name
        if name not in raw:
            raise SettingsError(f"conf: missing key {dotted}")
        values[name] = _convert(hints[name], raw[name], dotted)
    return cls(**values)


def _convert(hint: Any, value: Any, dotted: str) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, dotted + ".")
    if typing.get_origin(hint) is Mapping:
        return _string_table(value, dotted)
    expected = hint if isinstance(hint, type) else str
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    check = _CHECKS.get(dotted)
    if not ok:
        want = check[1] if check else _TYPE_WORDS.get(expected, expected.__name__)
        raise SettingsError(f"conf: {dotted} must be {want}, got {value!r}")
    if check and not check[0](value):
        raise SettingsError(f"conf: {dotted} must be {check[1]}, got {value!r}")
    return value


def _string_table(value: Any, dotted: str) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise SettingsError(f"conf: {dotted} must be a table of key = value, got {value!r}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, Mapping | list):
            raise SettingsError(f"conf: {dotted}.{key} must be a string, number or boolean, got {item!r}")
        # Spark conf values are strings; TOML booleans become "true"/"false" as Spark spells them.
        out[key] = str(item).lower() if isinstance(item, bool) else str(item)
    return MappingProxyType(out)


def _resolve_defaults(settings: Settings) -> Settings:
    """Fill values that depend on others (checkpoints live under the lake unless configured)."""
    if settings.streaming.checkpoint_root:
        return settings
    checkpoints = str(Path(settings.lake.root) / "_checkpoints")
    return dataclasses.replace(settings, streaming=dataclasses.replace(settings.streaming, checkpoint_root=checkpoints))
