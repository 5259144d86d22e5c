"""`zkledger collect zk|txnlog|logs|kraft`: run a collector into the lake's bronze tables."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.errors import UserError
from services.metrics import add_metrics_argument, metrics_server
from services.progress import Progress
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="collect ZooKeeper changes, transaction logs or Kafka controller logs into the lake",
        description="Collect ZooKeeper changes, transaction logs or Kafka controller logs into the lake. "
        "Every collector appends idempotently, so a restart continues where the last run stopped.",
    )
    sub = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
    zk = sub.add_parser("zk", help="live watch collector -> znode_events",
                        description="Snapshot a ZooKeeper subtree, then follow it with watches (never writes to "
                        "ZooKeeper). Auth and TLS come from [zookeeper] in the settings. Stops on SIGTERM/SIGINT "
                        "or after --duration, flushing what it has.")
    zk.add_argument("--zk", metavar="HOST:PORT", default=None,
                    help="ZooKeeper to watch, HOST:PORT[,HOST:PORT...] (default: [zookeeper] hosts in the settings)")
    zk.add_argument("--chroot", metavar="PATH", default=None, help="subtree to watch, e.g. /kafka (default: settings)")
    zk.add_argument("--duration", metavar="S", type=float, default=None, help="stop after S seconds")
    add_metrics_argument(zk)
    txn = sub.add_parser("txnlog", help="ZooKeeper transaction log reader -> znode_events",
                         description="Read <dir>/version-2/log.* (and the oldest usable snapshot when older logs "
                         "were purged) into znode_events; resumes after the largest zxid already stored.")
    txn.add_argument("--dir", metavar="ZK_DATA_DIR", required=True, help="ZooKeeper data dir (holds version-2/)")
    txn.add_argument("--follow", action="store_true", help="keep reading as the log grows (until SIGTERM/SIGINT)")
    txn.add_argument("--chroot", metavar="PATH", default=None,
                     help="keep only this subtree, paths relative to it (default: settings)")
    add_metrics_argument(txn)
    logs = sub.add_parser("logs", help="Kafka controller.log / state-change.log parser -> controller_decisions",
                          description="Parse Kafka controller.log, state-change.log and server.log files (a folder "
                          "is searched recursively, rotated files included) into controller_decisions; lines that "
                          "cannot be parsed go to quarantine. Resumes each file after its last committed line.")
    logs.add_argument("--path", metavar="FILE_OR_DIR", required=True, help="log file or folder of logs")
    logs.add_argument("--follow", action="store_true", help="keep reading as the logs grow")
    logs.add_argument("--broker-id", metavar="N", type=int, default=None,
                      help="broker that wrote the logs (default: from a broker-N or kafka_N folder name, else from "
                      "the log lines)")
    add_metrics_argument(logs)
    kraft = sub.add_parser("kraft", help="KRaft metadata log reader -> kraft_records",
                           description="Read the segments of a KRaft controller's or broker's metadata log "
                           "(__cluster_metadata-0, read-only; a copy works too) into kraft_records, one row per "
                           "record, control records included. Where segments were deleted before they were read, "
                           "a snapshot covering them is read instead and a gap row names it; malformed batches and "
                           "undecodable records go to quarantine. Resumes after the last offset stored.")
    kraft.add_argument("--dir", metavar="METADATA_LOG_DIR", required=True,
                       help="__cluster_metadata-0, or the log directory (metadata.log.dir) that holds it")
    kraft.add_argument("--follow", action="store_true",
                       help="keep reading as Kafka appends to the log (until SIGTERM/SIGINT)")
    add_metrics_argument(kraft)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    if args.source == "zk":
        return _collect_zk(args, ctx)
    if args.source == "txnlog":
        return _collect_txnlog(args, ctx)
    if args.source == "kraft":
        return _collect_kraft(args, ctx)
    return _collect_logs(args, ctx)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An Event set by SIGTERM/SIGINT (collectors then flush and exit cleanly)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _chroot(value: str | None, ctx: Context) -> str:
    chroot = value if value is not None else ctx.settings.zookeeper.chroot
    if chroot and not chroot.startswith("/"):
        raise UserError(f"--chroot must start with '/', got {chroot!r}")
    return str(chroot).rstrip("/")


def _line(what: str, summary: dict[str, Any]) -> str:
    return (f"collect {what}: {summary.get('events', 0)} events written, {summary.get('gaps', 0)} gaps, "
            f"{summary.get('quarantined', 0)} quarantined")


def _collect_zk(args: argparse.Namespace, ctx: Context) -> str:
    from kazoo.handlers.threading import KazooTimeoutError

    from collectors.zk_watch import ZkWatchCollector

    hosts = args.zk if args.zk is not None else ctx.settings.zookeeper.hosts
    if not hosts or "/" in hosts.split(",")[0].split(":")[0]:
        raise UserError(f"--zk must be HOST:PORT[,HOST:PORT...], got {hosts!r}")
    if args.duration is not None and args.duration <= 0:
        raise UserError(f"--duration must be positive, got {args.duration}")
    zs = ctx.settings.zookeeper
    with metrics_server("collect-zk", args.metrics_port, ctx.settings) as metrics, _stop_on_signals() as stop:
        collector = ZkWatchCollector(
            ctx.lake, hosts, _chroot(args.chroot, ctx), auth_data=zs.auth_data, use_ssl=zs.tls.use_ssl,
            certfile=zs.tls.certfile, keyfile=zs.tls.keyfile, ca=zs.tls.ca, verify_certs=zs.tls.verify,
            timeout=zs.session_timeout_s, batch_size=ctx.settings.collect.batch_size,
            flush_seconds=ctx.settings.collect.flush_seconds, metrics=metrics,
        )
        if args.duration is not None:
            timer = threading.Timer(args.duration, stop.set)
            timer.daemon = True
            timer.start()
        try:
            with _one_writer():
                collector.start()
        except KazooTimeoutError as e:
            hint = " over TLS: check [zookeeper.tls] ca, certfile and keyfile" if zs.tls.use_ssl else ""
            raise UserError(f"cannot connect to ZooKeeper at {hosts}{hint}") from e
        with Progress(label="znode events") as progress:
            summary = _run_with_progress(collector, stop, progress)
    return _line("zk", summary)


def _run_with_progress(collector: Any, stop: threading.Event, progress: Progress) -> dict[str, int]:
    try:
        while not stop.is_set():
            collector.step(timeout=0.2)
            progress.set(collector.writer.rows_written)
    finally:
        collector.stop()
    return dict(collector.summary())


def _collect_txnlog(args: argparse.Namespace, ctx: Context) -> str:
    from collectors.txnlog import TxnLogCollector, log_files

    data_dir = Path(args.dir)
    if not data_dir.is_dir():
        raise UserError(f"--dir {args.dir}: no such directory")
    if not log_files(data_dir) and not args.follow:
        raise UserError(f"--dir {args.dir}: no ZooKeeper transaction logs (version-2/log.*) found")
    with metrics_server("collect-txnlog", args.metrics_port, ctx.settings) as metrics, _stop_on_signals() as stop, \
            _one_writer(), Progress(label="znode events") as progress:
        collector = TxnLogCollector(
            ctx.lake, data_dir, follow=args.follow, chroot=_chroot(args.chroot, ctx),
            batch_size=ctx.settings.collect.batch_size, poll_seconds=ctx.settings.collect.poll_seconds,
            flush_seconds=ctx.settings.collect.flush_seconds, progress=progress.advance, metrics=metrics,
        )
        summary = collector.run(stop)
    line = _line("txnlog", summary) + f", last zxid {summary.get('last_zxid')}"
    stopped = summary.get("stopped") or []
    return line + (f"; stopped early: {'; '.join(stopped)}" if stopped else "")


@contextlib.contextmanager
def _one_writer() -> Iterator[None]:
    """A collector refused because another process writes with its writer id: a one-line error."""
    from collectors.bronze import WriterBusyError

    try:
        yield
    except WriterBusyError as exc:
        raise UserError(str(exc)) from exc


def _collect_logs(args: argparse.Namespace, ctx: Context) -> str:
    path = Path(args.path)
    if not path.exists():
        raise UserError(f"--path {args.path}: no such file or directory")
    if not (path.is_file() or path.is_dir()):
        raise UserError(f"--path {args.path}: not a regular file or a folder of log files")
    from models.events import INT32_MAX

    if args.broker_id is not None and not 0 <= args.broker_id <= INT32_MAX:
        raise UserError(f"--broker-id must be a broker id (0 .. {INT32_MAX}), got {args.broker_id}")
    from collectors.kafka_logs import LogPathError, TruncatedLogError, collect_logs

    with metrics_server("collect-logs", args.metrics_port, ctx.settings) as metrics, _stop_on_signals() as stop, \
            _one_writer(), Progress(label="log records") as progress:
        try:
            summary = collect_logs(ctx.lake, args.path, follow=args.follow, broker_id=args.broker_id,
                                   progress=progress.set, stop_event=stop,  # called with lines read so far
                                   metrics=metrics)
        except (TruncatedLogError, LogPathError) as exc:
            raise UserError(str(exc)) from exc
    return (f"collect logs: {summary.get('records', 0)} decisions from {summary.get('files', 0)} file(s), "
            f"{summary.get('lines', 0)} lines, {summary.get('quarantined', 0)} quarantined, "
            f"{summary.get('rotations', 0)} rotations")


def _collect_kraft(args: argparse.Namespace, ctx: Context) -> str:
    from collectors.kraft_collect import KraftCollector
    from collectors.kraft_log import KraftLogError, MetadataLogDir, NotAMetadataLogDirError

    given = Path(args.dir)
    if not given.is_dir():
        raise UserError(f"--dir {args.dir}: no such directory")
    try:
        log_dir = MetadataLogDir(given)
    except NotAMetadataLogDirError as exc:
        raise UserError(f"--dir {args.dir}: not a KRaft metadata log (no __cluster_metadata-0 here)") from exc
    if not log_dir.segments() and not args.follow:
        raise UserError(f"--dir {args.dir}: no log segments (*.log) in {log_dir.path.name}")
    with metrics_server("collect-kraft", args.metrics_port, ctx.settings) as metrics, _stop_on_signals() as stop, \
            _one_writer(), Progress(label="kraft records") as progress:
        collector = KraftCollector(
            ctx.lake, log_dir.path, follow=args.follow, batch_size=ctx.settings.collect.batch_size,
            poll_seconds=ctx.settings.collect.poll_seconds, flush_seconds=ctx.settings.collect.flush_seconds,
            progress=progress.advance, metrics=metrics,
        )
        try:
            summary = collector.run(stop)
        except (KraftLogError, OSError) as exc:
            raise UserError(f"collect kraft: {exc}") from exc
    line = (f"collect kraft: {summary['records']} records written ({summary['snapshot_records']} from snapshots), "
            f"{summary['gaps']} gaps, {summary['quarantined']} quarantined, next offset {summary['next_offset']}")
    if summary.get("rewritten"):
        line += (f", {summary['rewritten']} batches Raft rewrote after they were collected (stored beside the "
                 "truncated records; the newest leader epoch is the log's)")
    unreadable = summary.get("unreadable") or []
    return line + (f"; unreadable: {'; '.join(unreadable)}" if unreadable else "")
